"""The executor's per-call caches: zero-copy buffers by (address, bytes), kernel arguments kept set between
calls, arena blocks for outputs. Each cache is checked where it could go stale: memory freed and reused at
the same address, inputs modified in place, a kernel shared by two launches or set by another caller."""

import gc
import os
import weakref

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from torchfuser.runtime.device import get_device
from torchfuser.runtime.executor import KERNEL, RESHAPE
from torchfuser.runtime.call import Call, Runtime
from torchfuser.runtime.kernel_counts import (PROFILE_EVERY, PROFILE_EVERY_LATER, PROFILE_FIRST_CALLS,
                                              PROFILE_SPARSE_AFTER, KernelCounts)
from torchfuser.runtime.memory import ALIGNMENT, HostArena, OutputLayout, PlannedBlocks, ZeroCopyBinder, size_class
from torchfuser.runtime import steady_tape
from torchfuser.runtime.steady_tape import _Arming

pytestmark = pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")


def pointwise(x, y):
    return torch.sigmoid(x) * y + 1


def kernel_steps(plan):
    return [step[2] for step in plan.steps if step[1] == KERNEL]


def aligned_floats(n: int) -> np.ndarray:
    """n float32 in memory we own and can rewrite under new tensor objects, 64-byte aligned."""
    raw = np.empty(n * 4 + ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start : start + n * 4].view(np.float32)


def test_a_new_tensor_at_a_freed_tensors_address_gives_its_own_results():
    memory = aligned_floats(4096)
    f = torchfuser.compile(pointwise)
    y = torch.randn(4096)
    with torch.no_grad():
        memory[:] = np.random.randn(4096)
        x = torch.from_numpy(memory)
        address = x.data_ptr()
        torch.testing.assert_close(f(x, y), pointwise(x, y))
        del x
        gc.collect()
        memory[:] = np.random.randn(4096)  # new contents, then a new tensor object over the same bytes
        x2 = torch.from_numpy(memory)
        assert x2.data_ptr() == address
        torch.testing.assert_close(f(x2, y), pointwise(x2, y))


def test_the_same_address_with_another_storage_size_gets_another_buffer():
    device = get_device()
    binder = ZeroCopyBinder(device)
    memory = aligned_floats(2048)
    small, large = torch.from_numpy(memory[:1024]), torch.from_numpy(memory)
    assert small.data_ptr() == large.data_ptr()
    assert binder.bind(small) is binder.bind(torch.from_numpy(memory[:1024]))  # same bytes: reused
    assert binder.bind(small) is not binder.bind(large)
    # and through a compiled graph: the same shape read from a larger storage at the same address
    f = torchfuser.compile(pointwise)
    y = torch.randn(1024)
    with torch.no_grad():
        memory[:] = np.random.randn(2048)
        torch.testing.assert_close(f(small, y), pointwise(small, y))
        view = large[:1024]
        torch.testing.assert_close(f(view, y), pointwise(view, y))


def test_zero_copy_buffers_never_keep_user_memory_alive():
    binder = Runtime.for_device(get_device()).binder
    if not isinstance(binder, ZeroCopyBinder):
        pytest.skip("device copies to its own memory")
    freed = []
    array = np.empty(1 << 16, np.float32)
    weakref.finalize(array, freed.append, True)
    tensor = torch.from_numpy(array)
    binder.bind(tensor)
    f = torchfuser.compile(pointwise)
    with torch.no_grad():
        f(tensor, tensor)
    del tensor, array
    gc.collect()
    assert freed, "a cached buffer (or a call) still holds the user's array"


def test_inputs_modified_in_place_between_calls():
    f = torchfuser.compile(pointwise)
    x, y = torch.randn(3000), torch.randn(3000)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x, y), pointwise(x, y))
            x.mul_(-1.5).add_(0.25)
            y[::7] = 3.0


def test_weights_modified_in_place_between_calls():
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16)).eval()
    f = torchfuser.compile(model)
    x = torch.randn(8, 32)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
            model[0].weight.mul_(0.5)
            model[2].bias.add_(1.0)


def test_two_instances_of_one_model_called_in_turn_keep_their_own_transformed_weights(monkeypatch):
    """Two instances of a class share Dynamo's graph and so one plan; each keeps its folded, re-laid-out and
    packed weights, so calls in turn make none again (kept by one slot, each call re-made every weight)."""
    from torchfuser.ir.weights import WeightTransform
    from torchfuser.runtime import gemm_launch

    def conv_bn_relu():
        model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()).eval()
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
        return model

    torch.manual_seed(0)
    models = [conv_bn_relu(), conv_bn_relu()]
    compiled = [torch.compile(m, backend="torchfuser") for m in models]
    x = torch.randn(2, 8, 9, 9)
    made, packed = [], []
    original_call, original_pack = WeightTransform.__call__, gemm_launch.pack_panels
    monkeypatch.setattr(WeightTransform, "__call__", lambda t, *a: made.append(t) or original_call(t, *a))
    monkeypatch.setattr(gemm_launch, "pack_panels", lambda b, n: packed.append(b) or original_pack(b, n))
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for f, m in zip(compiled, models):
            torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        made.clear(), packed.clear()
        for _ in range(3):
            for f, m in zip(compiled, models):
                torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
    assert len({id(r.plan) for r in reports}) == 1  # one plan: the case where the keeps are shared
    assert made == [] and packed == []


def test_steady_calls_find_packed_weights_without_making_their_views(monkeypatch):
    """A Linear's weight reaches its GEMM as a virtual transpose; the packed copy is found from the view's root
    and layout, so a steady call makes no view (a PyTorch call), and an in-place update is still seen."""
    from torchfuser.runtime.virtual_views import VirtualView

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).eval()
    f = torchfuser.compile(model)
    x = torch.randn(4, 64)
    made = []
    real = VirtualView.real
    monkeypatch.setattr(VirtualView, "real", lambda view: made.append(view) or real(view))
    with torch.no_grad():
        f(x)
        made.clear()
        for _ in range(3):
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-5)
        assert made == []
        model[2].weight.mul_(-0.5)  # the view's root changes version: packed again, from the real view
        torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-5)
        assert len(made) == 1


def test_a_gemm_operand_computed_by_a_kernel_is_packed_again_every_call():
    """B is a planned result: the same tensor every call, rewritten by its kernel with no new version, so its
    packed copy cannot be kept by version (it was: every call after the first used the first call's B)."""
    fn = lambda a, x: F.gelu(a @ (x * 2.0 + 1.0))  # noqa: E731
    f = torchfuser.compile(fn)
    with torch.no_grad():
        for _ in range(3):
            a, x = torch.randn(64, 48), torch.randn(48, 80)
            torch.testing.assert_close(f(a, x), fn(a, x), rtol=1e-4, atol=1e-4)
    assert [k.kind for k in torchfuser.last_report().kernels] == ["pointwise", "gemm"]


def test_a_convolution_weight_computed_by_a_kernel_is_transformed_again_every_call():
    """The weight as a GEMM's B matrix is a weight transform, kept by its input's version: of a planned result
    it is made every call instead."""
    fn = lambda x, w: F.relu(F.conv2d(x, w * 2.0 + 1.0, padding=1))  # noqa: E731
    f = torchfuser.compile(fn)
    x = torch.randn(2, 16, 9, 9)
    with torch.no_grad():
        for _ in range(3):
            w = torch.randn(8, 16, 3, 3)
            torch.testing.assert_close(f(x, w), fn(x, w), rtol=1e-4, atol=1e-4)
    assert "gemm" in [k.kind for k in torchfuser.last_report().kernels]


@pytest.mark.parametrize("reshape", [lambda t: t.view(5, 3, 7), lambda t: t.unsqueeze(0), lambda t: t.reshape(-1)])
def test_a_kernel_result_only_reshaped_is_allocated_in_the_views_shape(reshape):
    """A view that only reshapes a kernel's fresh result (the block's output view) costs no view op: the kernel's
    output is allocated in the view's shape and passed on; results, shapes and strides are eager's."""
    fn = lambda x, y: reshape(torch.sigmoid(x) * y + 1)  # noqa: E731
    f = torchfuser.compile(fn)
    with torch.no_grad():
        for _ in range(3):
            x, y = torch.randn(15, 7), torch.randn(15, 7)
            out, expected = f(x, y), fn(x, y)
            torch.testing.assert_close(out, expected)
            assert out.stride() == expected.stride() and out._base is None  # not a view of the kernel's result
    assert RESHAPE in [step[1] for step in torchfuser.last_report().plan.steps]


def test_outputs_are_fresh_tensors_on_every_call():
    f = torchfuser.compile(pointwise)
    x, y = torch.randn(5000), torch.randn(5000)
    with torch.no_grad():
        first = f(x, y)
        kept_view = f(x * 2, y).view(50, 100)  # only a view survives: its block must stay taken
        expected_first, expected_view = first.clone(), kept_view.clone()
        outs = [f(torch.randn(5000), y) for _ in range(10)]
    addresses = {o.data_ptr() for o in outs} | {first.data_ptr(), kept_view.data_ptr()}
    assert len(addresses) == 12
    torch.testing.assert_close(first, expected_first)
    torch.testing.assert_close(kept_view, expected_view)


def test_a_steady_call_sets_no_kernel_arguments(monkeypatch):
    """Three layers with one spec share a kernel; each launch owns a copy, so nothing is re-set (by the plan's
    steps or a steady tape's replay)."""
    model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(64, 64), nn.ReLU())]).eval()
    f = torchfuser.compile(model)
    x = torch.randn(16, 64)
    with torch.no_grad():
        f(x)
        steps = kernel_steps(torchfuser.last_report().plan)
        bounds = [b for step in steps for b in step.bound.values()]
        assert len({id(b.kernels[0]) for b in bounds}) == len(bounds) == 3
        touched = set()  # the Bounds whose kernels (or a steady tape's kernels in their stead) get arguments set
        original, original_tape_set, original_arming_set = Call._set_arguments, steady_tape.set_buffer, _Arming.set

        def counting(self, bound, *args):
            touched.add(id(bound))
            return original(self, bound, *args)

        def counting_tape(positions, buffer, held, source):
            touched.update(id(b) for _, _, b in positions)
            return original_tape_set(positions, buffer, held, source)

        def counting_arming(self, positions, source, buffer):
            touched.update(id(b) for _, _, b in tapes[0].slow_positions[source])
            return original_arming_set(self, positions, source, buffer)

        monkeypatch.setattr(Call, "_set_arguments", counting)
        monkeypatch.setattr(steady_tape, "set_buffer", counting_tape)
        monkeypatch.setattr(_Arming, "set", counting_arming)
        for _ in range(3):
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
        steady = set(touched)
        tapes = [torchfuser.last_report().plan._tapes[()]]
        x2 = torch.randn(16, 64)
        torch.testing.assert_close(f(x2), model(x2), rtol=1e-4, atol=1e-4)
    if isinstance(Runtime.for_device(get_device()).binder, ZeroCopyBinder):  # uploads are new buffers per call
        # three steady calls set nothing; a new input buffer changes the first layer's arguments only
        assert steady == set() and touched == {id(bounds[0])}


def test_virtual_views_of_weights_are_kept_until_the_weight_moves(monkeypatch):
    """A weight's virtual transpose is computed once and kept (the same object every call, so the GEMM's inputs
    are the objects its launch last saw); a weight given new storage (`p.data = ...`) gets a new view."""
    import torchfuser.runtime.executor as executor

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).eval()
    f = torchfuser.compile(model)
    x = torch.randn(4, 64)
    made = []
    original = executor.virtual_view
    monkeypatch.setattr(executor, "virtual_view", lambda *args: made.append(args[0]) or original(*args))
    with torch.no_grad():
        f(x)
        assert len(made) == 2  # one per Linear's weight
        for _ in range(3):
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-5)
        assert len(made) == 2
        model[0].weight.data = torch.randn(128, 64)
        torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-5)
        assert len(made) == 3


def test_a_steady_call_at_the_same_addresses_looks_up_no_buffers(monkeypatch):
    """Inputs and outputs at the addresses of the call before (the output's block came back to the arena)
    find the kernels armed with their buffers; any new address binds again."""
    binder = Runtime.for_device(get_device()).binder
    if not isinstance(binder, ZeroCopyBinder):
        pytest.skip("device copies to its own memory")
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16)).eval()
    f = torchfuser.compile(model)
    x = torch.randn(8, 32)
    lookups = []
    with torch.no_grad():
        for _ in range(2):
            f(x)
        original = binder.bind
        monkeypatch.setattr(binder, "bind", lambda t: lookups.append(t.data_ptr()) or original(t))
        for _ in range(3):
            torch.testing.assert_close(f(x), model(x), rtol=1e-4, atol=1e-4)
        assert lookups == []
        kept = f(x)  # held: the next output gets another block, which must be bound
        x2 = torch.randn(8, 32)
        torch.testing.assert_close(f(x2), model(x2), rtol=1e-4, atol=1e-4)
        assert x2.data_ptr() in lookups
        torch.testing.assert_close(kept, model(x), rtol=1e-4, atol=1e-4)


def test_a_caller_that_keeps_the_last_result_sets_no_arguments_after_two_calls(monkeypatch):
    """`y = f(x)` in a loop holds the last output while the next call runs, so outputs come from two arena
    blocks in turn; a second set of kernel copies stays armed for the other block. Every result is its own."""
    binder = Runtime.for_device(get_device()).binder
    if not isinstance(binder, ZeroCopyBinder):
        pytest.skip("device copies to its own memory")
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16)).eval()
    f = torchfuser.compile(model)
    xs = [torch.randn(8, 32) for _ in range(2)]
    x = xs[0].clone()
    with torch.no_grad():
        y = f(x)
        y = f(x)  # the first output is held: the second comes from another block, armed on the spare copies
        last = kernel_steps(torchfuser.last_report().plan)[-1].last
        sets = []
        for kernel in (*last.kernels, *last.spare[0]):
            original = kernel.set_args
            monkeypatch.setattr(kernel, "set_args", lambda *a, _original=original: sets.append(1) or _original(*a))
        results = []
        for i in range(6):
            x.copy_(xs[i % 2])  # the same input tensor with new values: the kernels read it where it lies
            before, y = y, f(x)  # the result before stays alive while the next call runs, as in a loop
            results.append(y.clone())
            torch.testing.assert_close(before, model(xs[(i + 1) % 2]) if i else results[0], rtol=1e-4, atol=1e-4)
            del before
        for i, result in enumerate(results):
            torch.testing.assert_close(result, model(xs[i % 2]), rtol=1e-4, atol=1e-4)
    assert sets == []

def test_a_one_off_launch_of_the_same_kernel_between_calls():
    """run_single (calling the fused node directly) sets the built kernel's arguments; the plan's launch
    runs its own copy, whose arguments stay as it set them."""
    def unique(x, y):  # a constant no other test uses
        return torch.sigmoid(x) * y - 0.123

    f = torchfuser.compile(unique)
    x, y = torch.randn(4096), torch.randn(4096)
    with torch.no_grad():
        torch.testing.assert_close(f(x, y), unique(x, y))
        (step,) = kernel_steps(torchfuser.last_report().plan)
        (bound,) = step.bound.values()
        assert all(k is not b.kernel for k, b in zip(bound.kernels, bound.builts))
        a, b = torch.randn(4096), torch.randn(4096)
        torch.testing.assert_close(step.target(a, b), unique(a, b))
        torch.testing.assert_close(f(x, y), unique(x, y))


def test_a_fallback_between_kernels_reads_finished_results():
    """Launches may wait to be enqueued together (CPU devices); a host read of their output first runs them."""
    def fn(x, y):
        h = torch.sigmoid(x) * y
        return (torch.cumsum(h, -1) + 1).tanh()  # cumsum runs in PyTorch between two kernels

    f = torchfuser.compile(fn)
    x, y = torch.randn(64, 300), torch.randn(64, 300)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x, y), fn(x, y), rtol=1e-5, atol=1e-5)
            x.add_(0.5)
    plan = torchfuser.last_report().plan
    assert len(kernel_steps(plan)) == 2 and all(s.launches == 3 for s in plan.stats.values())


def test_one_layout_whose_inputs_are_copied_in_some_calls_only():
    """Misaligned storage is copied (to offset 0) before binding: one layout, two sets of offsets."""
    f = torchfuser.compile(pointwise)
    with torch.no_grad():
        f(torch.randn(1000), torch.randn(1000))
        plan = torchfuser.last_report().plan
        raw = np.random.randn(1100).astype(np.float32)
        misaligned = torch.from_numpy(raw[1:])  # numpy aligns to 16 bytes: 4 past that is never 64-aligned
        aligned = torch.from_numpy(aligned_floats(1100))
        aligned.copy_(torch.randn(1100))
        y = torch.randn(1000)
        for storage in (misaligned, aligned, misaligned, aligned):
            assert (storage.data_ptr() % ALIGNMENT == 0) == (storage is aligned)
            x = storage[16:1016]
            (out,) = plan.run([x, y])
            torch.testing.assert_close(out, pointwise(x, y))
            del out  # its block (and the copy's) come back next time: the same buffers under another list
        (step,) = kernel_steps(plan)
        assert len(step.bound) == 2  # the compile-time layout (offset 0) and offset 16


def test_new_offsets_and_layouts_through_one_plan():
    """A plan called directly with views at other offsets and strides configures each layout once."""
    f = torchfuser.compile(pointwise)
    with torch.no_grad():
        f(torch.randn(64, 64), torch.randn(64, 64))
        plan = torchfuser.last_report().plan
        base = torch.randn(80 * 64)
        y = torch.randn(64, 64)
        for x in (base[:4096].view(64, 64), base[16:4112].view(64, 64), base[1:4097].view(64, 64),
                  base[:4096].view(64, 64).t(), base[:4096].view(64, 64)):
            (out,) = plan.run([x, y])
            torch.testing.assert_close(out, pointwise(x, y))
        (step,) = kernel_steps(plan)
        assert len(step.bound) == 4  # the repeated layout hit its cached launch


def test_arena_reuses_a_block_only_when_no_tensor_refers_to_it():
    arena = HostArena()
    layout = OutputLayout.of((64, 32), (32, 1), torch.float32)
    a = arena.allocate(layout)
    address = a.data_ptr()
    assert address % ALIGNMENT == 0 and a.shape == (64, 32) and a.stride() == (32, 1)
    b = arena.allocate(layout)
    assert b.data_ptr() != address
    view = a[3:]
    del a
    assert arena.allocate(layout).data_ptr() != address  # the view still uses it
    del view
    gc.collect()
    c = arena.allocate(layout)
    assert c.data_ptr() == address
    # the same bytes asked for with another layout and dtype reuse the free block
    del c
    d = arena.allocate(OutputLayout.of((32, 32), (1, 32), torch.int64))
    assert d.data_ptr() == address and d.dtype == torch.int64 and d.stride() == (1, 32)


def test_size_classes_cover_a_size_with_at_most_an_eighth_unused():
    for nbytes in [1, 64, 65, 4096, 4097, 133120, 135168, (1 << 20) + 1, 3 << 27]:
        size = size_class(nbytes)
        assert nbytes <= size <= max(nbytes * 1.125, nbytes + ALIGNMENT - 1) and size % ALIGNMENT == 0


def test_a_growing_kv_cache_takes_the_blocks_of_the_calls_before_it():
    """Three generations of each layer's K and V are alive at once (the model's cache, the one passed in, the one
    being made), one token longer each call: after the first calls of a size class, no new block."""
    arena = HostArena()
    layers, alive, reused = 12, [], 0

    def layout(length: int) -> OutputLayout:
        return OutputLayout.of((1, 8, length, 64), (8 * length * 64, length * 64, 64, 1), torch.float32)

    for length in range(40, 80):
        before = arena.bytes
        made = [arena.allocate(layout(length)) for _ in range(2 * layers)]
        assert all(t.data_ptr() % ALIGNMENT == 0 for t in made)
        assert len({t.data_ptr() for t in made + [t for g in alive for t in g]}) == 2 * layers * (len(alive) + 1)
        if length - 3 >= 40 and size_class(layout(length).nbytes) == size_class(layout(length - 3).nbytes):
            assert arena.bytes == before  # the generation three calls back is free, in this size class
            reused += 1
        alive = (alive + [made])[-2:]
    assert reused >= 10  # a class spans 4 to 8 lengths here


def test_more_live_outputs_of_one_size_than_a_few_still_come_from_the_arena():
    arena = HostArena()
    layout = OutputLayout.of((300, 300), (300, 1), torch.float32)
    kept = [arena.allocate(layout) for _ in range(40)]
    assert arena.bytes == 40 * size_class(layout.nbytes)
    del kept
    again = [arena.allocate(layout) for _ in range(40)]
    assert arena.bytes == 40 * size_class(layout.nbytes) and len({t.data_ptr() for t in again}) == 40


def test_arena_over_its_budget_gives_back_free_blocks_of_other_sizes():
    small = OutputLayout.of((1000,), (1,), torch.float32)
    big = OutputLayout.of((5000,), (1,), torch.float32)
    arena = HostArena(byte_budget=2 * size_class(big.nbytes) + size_class(small.nbytes))
    held = arena.allocate(small)
    freed = [arena.allocate(small) for _ in range(3)]
    del freed
    bigs = [arena.allocate(big) for _ in range(2)]  # over the budget: the free small blocks go back
    assert arena.bytes == size_class(small.nbytes) + 2 * size_class(big.nbytes)
    assert held.data_ptr() % ALIGNMENT == 0 and len(bigs) == 2
    beyond = [arena.allocate(big) for _ in range(3)]  # nothing free to give back: plain allocations
    assert arena.bytes == size_class(small.nbytes) + 2 * size_class(big.nbytes)
    assert all(t.shape == (5000,) for t in beyond)


def _mapping_flags(address: int) -> set[str]:
    """The VmFlags of the mapping that holds `address` (Linux /proc/self/smaps)."""
    found = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                start, end = (int(x, 16) for x in head.split("-"))
                found = start <= address < end
            elif found and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_arena_blocks_do_not_ask_for_huge_pages():
    """numpy advises huge pages for arrays of 4 MiB and more; on a virtual machine that backs memory lazily a
    huge page's first touch costs many times its small pages, and a first call at a new size pays it in its
    kernels. The arena's blocks (and a plan's planned blocks) come from PyTorch's allocator instead."""
    layout = OutputLayout.of((4 << 20,), (1,), torch.float32)  # 16 MiB
    block = HostArena().allocate(layout)
    block.fill_(1.0)
    middle = layout.nbytes // 2  # numpy advises the whole pages of an array: its first one may be left out
    assert "hg" not in _mapping_flags(block.data_ptr() + middle)
    planned = PlannedBlocks([layout.nbytes]).tensor(0, layout)
    planned.fill_(1.0)
    assert "hg" not in _mapping_flags(planned.data_ptr() + middle)
    assert "hg" in _mapping_flags(np.ones(4 << 20, np.float32).ctypes.data + middle)  # the check sees the advice


def test_kernel_copies_share_pyopencls_generated_argument_code():
    """Each launch bound for a new layout makes its own cl.Kernel copies; declaring their scalar types reuses the
    argument-setting code pyopencl generated for the first (it keeps it on disk only), and every copy still
    sets its own arguments."""
    import pyopencl as cl
    import pyopencl.invoker

    from torchfuser.runtime.bound import cl_module as _pyopencl, copy_kernel as _copy_kernel

    _pyopencl()
    generate = pyopencl.invoker.generate_enqueue_and_set_args
    assert generate.memoised
    device = get_device()
    source = "__kernel void fill_tf_test(__global float* x, const float v) { x[get_global_id(0)] = v; }"
    kernel = cl.Program(device.context, source).build().fill_tf_test
    copies = [_copy_kernel(kernel) for _ in range(3)]
    generated = len(generate.found)
    outs = [np.zeros(4, np.float32) for _ in copies]
    for value, (copy, out) in enumerate(zip(copies, outs)):
        copy.set_scalar_arg_dtypes([None, np.float32])
        buffer = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=out)
        copy.set_args(buffer, np.float32(value + 0.5))
        cl.enqueue_nd_range_kernel(device.queue, copy, (4,), None)
        device.queue.finish()
        del buffer
    assert [out.tolist() for out in outs] == [[v + 0.5] * 4 for v in range(3)]
    assert len(generate.found) == generated + 1  # generated once, for the first copy


VIEW_CALLS = [  # (op, arguments after the tensor) for each op the executor calls as a Tensor method
    (torch.ops.aten.view.default, ([6, 4],)), (torch.ops.aten.permute.default, ([2, 0, 1],)),
    (torch.ops.aten.t.default, ()), (torch.ops.aten.transpose.int, (0, 2)),
    (torch.ops.aten.unsqueeze.default, (1,)), (torch.ops.aten.squeeze.dim, (0,)),
    (torch.ops.aten.squeeze.dims, ([0, 1],)), (torch.ops.aten.squeeze.default, ()),
    (torch.ops.aten.select.int, (2, 3)), (torch.ops.aten.split_with_sizes.default, ([1, 3], 2)),
    (torch.ops.aten.unbind.int, (1,)), (torch.ops.aten.unflatten.int, (2, [2, 2])),
    (torch.ops.aten.as_strided.default, ([2, 2], [4, 1], 3)),
]


@pytest.mark.parametrize("op, args", VIEW_CALLS, ids=[str(op) for op, _ in VIEW_CALLS])
def test_view_steps_call_tensor_methods_that_make_the_op_s_views(op, args):
    from torchfuser.runtime.step_args import _VIEW_METHODS

    base = torch.arange(24.0).reshape(2, 3, 4)
    if op is torch.ops.aten.t.default:
        base = base[0]
    if op in (torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims, torch.ops.aten.squeeze.default):
        base = base[:1, :1]
    method = _VIEW_METHODS[op]
    expected, actual = op(base, *args), method(base, *args)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    actual = actual if isinstance(actual, (list, tuple)) else [actual]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert (a.shape, a.stride(), a.storage_offset()) == (e.shape, e.stride(), e.storage_offset())
        assert a.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        assert torch.equal(a, e)


def test_launches_of_calls_not_profiled_are_counted_when_the_stats_are_read():
    f = torchfuser.compile(pointwise)
    x, y = torch.randn(5000), torch.randn(5000)
    with torch.no_grad():
        for _ in range(25):
            f(x, y)
    plan = torchfuser.last_report().plan
    (stats,) = plan.stats.values()
    assert (stats.launches, stats.profiled) == (25, 20)  # calls 1..19, then every 10th: 20
    plan.stats.clear()
    with torch.no_grad():
        f(x, y)
    assert [s.launches for s in plan.stats.values()] == [1]


def test_profile_next_profiles_that_many_calls_whatever_their_number_then_the_default_again():
    f = torchfuser.compile(pointwise)
    x, y = torch.randn(5000), torch.randn(5000)
    with torch.no_grad():
        for _ in range(31):  # past the first 20 calls: every 10th profiled
            f(x, y)
        plan = torchfuser.last_report().plan
        plan.stats.clear()
        plan.profile_next(3)
        for _ in range(5):  # calls 31..35: three on request, none of the default's
            f(x, y)
    (stats,) = plan.stats.values()
    assert (stats.launches, stats.profiled) == (5, 3) and stats.seconds > 0


def test_the_layers_of_a_model_configure_each_cat_and_attention_once_per_layout():
    """Nodes of one structure (the same cat or attention in every layer) share their launch for the same input
    layouts; a node that differs in what it computes, and GEMMs (whose tuned choices are per node), do not."""
    from torchfuser.ir.kernels.attention import AttentionKernel
    from torchfuser.ir.kernels.cat import CatKernel
    from torchfuser.ir.program import Const, ProgramBuilder
    from torchfuser.runtime.launch import configure

    a, b, other = CatKernel(2, group=1), CatKernel(2, group=5), CatKernel(1, group=6)
    assert a.structure() == b.structure() != other.structure()
    past, new = torch.randn(1, 4, 9, 8), torch.randn(1, 4, 1, 8)
    assert configure(a, [past, new]) is configure(b, [past, new])
    assert configure(other, [torch.randn(1, 3, 8), torch.randn(1, 2, 8)]) is not configure(a, [past, new])
    assert configure(a, [torch.randn(1, 4, 10, 8), new]) is not configure(a, [past, new])
    builder = ProgramBuilder(["float32"])
    score = builder.build([builder.emit("mul", (0, Const(0.125, "float32")), "float32")])
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 9, 8)
    first, second = AttentionKernel(score, 0, causal=False), AttentionKernel(score, 3, causal=False)
    assert configure(first, [q, k, k]) is configure(second, [q, k, k])
    assert configure(AttentionKernel(score, 4, causal=True), [q, k, k]) is not configure(first, [q, k, k])


def test_profiled_calls_thin_out_once_a_plan_has_made_many_calls():
    counts = KernelCounts()
    profiled = [calls for calls in range(PROFILE_SPARSE_AFTER + 3 * PROFILE_EVERY_LATER) if counts.profiles(calls)]
    early = list(range(1, PROFILE_FIRST_CALLS))
    middle = list(range(PROFILE_FIRST_CALLS, PROFILE_SPARSE_AFTER, PROFILE_EVERY))
    late = [PROFILE_SPARSE_AFTER + k * PROFILE_EVERY_LATER for k in range(3)]
    assert profiled == early + middle + late
    counts.profile_next(2)  # asked for: the next two calls, whatever their number
    assert [counts.profiles(c) for c in (1301, 1302, 1303, 1400)] == [True, True, False, True]
