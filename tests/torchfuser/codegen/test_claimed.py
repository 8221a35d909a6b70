"""The claimed form of a kernel (codegen/opencl/claimed.py): the same results over any grid, whoever claims which
slices, and no claimed form where work-items are not independent."""

import numpy as np
import pytest

from torchfuser.codegen.opencl.claimed import CELL_INTS, CLAIMED_SUFFIX, claimed_source
from torchfuser.runtime.device import get_device

# parameters named like the claimed form's own loop variables; an early return; all three grid dims
SOURCE = """
__kernel void grid3(__global const float* restrict src, __global float* restrict dst, const int n, const int i) {
  const size_t a = get_global_id(0), b = get_global_id(1), c = get_global_id(2);
  if (a * 100 + b * 10 + c == (size_t)i) return;
  dst[(c * 5 + b) * 7 + a] = src[(c * 5 + b) * 7 + a] * 2.0f + (float)n;
}
"""


def test_work_item_functions_other_than_the_global_id_or_barriers_have_no_claimed_form():
    assert claimed_source(SOURCE, "grid3") is not None
    for other in ("get_local_id(0)", "get_group_id(0)", "get_global_size(0)", "get_num_groups(0)"):
        assert claimed_source(SOURCE.replace("get_global_id(2)", other), "grid3") is None
    assert claimed_source(SOURCE.replace("if (a", "barrier(CLK_LOCAL_MEM_FENCE);\n  if (a"), "grid3") is None
    assert claimed_source(SOURCE, "another") is None


def test_the_kernel_s_lines_keep_their_numbers():
    """The explorer's source map (codegen/source_lines.py) is made for the kernel's own source and read against
    the claimed form: every line of the kernel stays at its number, the claimed loop comes after."""
    plain, claimed = SOURCE.split("\n"), claimed_source(SOURCE, "grid3").split("\n")
    assert len(claimed) > len(plain)
    changed = [i for i, (a, b) in enumerate(zip(plain, claimed)) if a != b]
    assert changed == [1, 2]  # the signature (now the body function's) and the line reading the global ids
    assert claimed[2] == "  const size_t a = tf_g0, b = tf_g1, c = tf_g2;"


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's two devices")
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_the_claimed_form_computes_the_kernel_whoever_claims_each_slice(dim):
    import pyopencl as cl

    device = get_device()
    grid = (7, 5, 3)
    src = np.arange(7 * 5 * 3, dtype=np.float32)
    expected = src * 2.0 + 4.0
    expected[(1 * 5 + 2) * 7 + 3] = -1.0  # the work-item (3, 2, 1) returns early: its element stays as it was
    flags = cl.mem_flags.USE_HOST_PTR
    claims = np.zeros(2 * CELL_INTS, np.int32)
    source = claimed_source(SOURCE, "grid3")
    program = cl.Program(device.context, source).build(devices=[device.cl_device, device.inline.cl_device])
    for threads_here in (0, 1):  # the workers alone, then both sides claiming
        dst = np.full_like(src, -1.0)
        buffers = [cl.Buffer(device.context, flags | cl.mem_flags.READ_WRITE, hostbuf=a) for a in (src, dst, claims)]
        claims[:] = 0
        kernels = [cl.Kernel(program, "grid3" + CLAIMED_SUFFIX) for _ in range(2)]
        for kernel in kernels:
            kernel.set_args(buffers[0], buffers[1], np.int32(4), np.int32(321), buffers[2], np.int32(1),
                            np.int32(dim), np.int64(grid[0]), np.int64(grid[1]), np.int64(grid[2]))
        worker = cl.enqueue_nd_range_kernel(device.queue, kernels[0], (2,), (1,))
        if threads_here:
            cl.enqueue_nd_range_kernel(device.inline.queue, kernels[1], (1,), (1,))
        worker.wait()
        assert claims[CELL_INTS + 1] == grid[dim]  # every slice counted done once (cell 1)
        assert claims[:CELL_INTS].sum() == 0  # cell 0 untouched
        np.testing.assert_array_equal(dst, expected)
