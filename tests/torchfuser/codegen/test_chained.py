"""Chained kernels (codegen/opencl/chained.py): several launches as one, each part reading what the one before wrote;
no chain where a part's work-items are not independent or the parts' helpers differ."""

import numpy as np
import pytest

from torchfuser.codegen.opencl.chained import chained_source
from torchfuser.runtime.device import get_device

PRELUDE = "inline float twice(float x) { return 2.0f * x; }\n"
SCALE = PRELUDE + """
__kernel void scale(__global const float* restrict src, __global float* restrict dst, const float k) {
  const size_t a = get_global_id(0), b = get_global_id(1);
  dst[b * 7 + a] = twice(src[b * 7 + a]) * k;
}
"""
SHIFT = PRELUDE + """
__kernel void shift(__global const float* restrict src, __global float* restrict dst, const int n) {
  const size_t i = get_global_id(0);
  if (i >= (size_t)n) return;
  dst[i] = src[i] + (float)i;
}
"""


def test_a_kernel_launched_twice_has_its_body_once_and_parts_get_their_own_parameters():
    name, source = chained_source([(SCALE, "scale", (7, 5)), (SHIFT, "shift", (40,)), (SCALE, "scale", (7, 5))])
    assert source.count("inline void scale__body(") == 1 and source.count("inline float twice(") == 1
    assert f"__kernel void {name}(" in source
    chain = source[source.index(f"__kernel void {name}("):]
    for part in ("c0_src", "c0_dst", "c1_n", "c2_k"):
        assert part in chain
    assert "restrict" not in chain  # two parts' buffers may be one


def test_a_chain_of_the_same_kernels_at_another_grid_parses_no_source_again():
    """A symbolic plan records a tape, and so a chain, at each new length: the kernels' sources are the same."""
    from torchfuser.codegen.opencl.claimed import body_form

    chained_source([(SCALE, "scale", (7, 5)), (SHIFT, "shift", (40,))])
    misses = body_form.cache_info().misses
    name, source = chained_source([(SCALE, "scale", (7, 6)), (SHIFT, "shift", (41,))])
    assert body_form.cache_info().misses == misses and "tf_g0 < 41" in source


def test_no_chain_where_a_part_is_not_a_function_of_its_global_ids_or_helpers_differ():
    barrier = SHIFT.replace("const size_t i", "barrier(CLK_LOCAL_MEM_FENCE);\n  const size_t i")
    assert chained_source([(SCALE, "scale", (7, 5)), (barrier, "shift", (40,))]) is None
    local = SHIFT.replace("get_global_id(0)", "get_local_id(0)")
    assert chained_source([(SCALE, "scale", (7, 5)), (local, "shift", (40,))]) is None
    other = SHIFT.replace("2.0f * x", "x + x")
    assert chained_source([(SCALE, "scale", (7, 5)), (other, "shift", (40,))]) is None


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's in-thread device")
def test_each_part_reads_what_the_part_before_wrote():
    import pyopencl as cl

    device = get_device()
    src = np.arange(35, dtype=np.float32) - 17.0
    mid, dst = np.full(35, np.nan, np.float32), np.full(40, -1.0, np.float32)
    name, source = chained_source([(SCALE, "scale", (7, 5)), (SHIFT, "shift", (40,))])
    program = cl.Program(device.context, source).build(devices=[device.inline.cl_device])
    flags = cl.mem_flags.USE_HOST_PTR | cl.mem_flags.READ_WRITE
    buffers = [cl.Buffer(device.context, flags, hostbuf=a) for a in (src, mid, dst)]
    kernel = cl.Kernel(program, name)
    kernel.set_args(buffers[0], buffers[1], np.float32(0.5), buffers[1], buffers[2], np.int32(35))
    cl.enqueue_nd_range_kernel(device.inline.queue, kernel, (1,), (1,)).wait()
    np.testing.assert_array_equal(mid, src)  # twice(x) * 0.5
    np.testing.assert_array_equal(dst[:35], src + np.arange(35, dtype=np.float32))
    np.testing.assert_array_equal(dst[35:], -1.0)  # the work-items past n returned early
