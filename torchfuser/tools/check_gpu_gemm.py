"""Check TorchFuser's tiled (GPU) GEMM variants on a real OpenCL GPU: numerics and GFLOP/s vs torch.mm on CPU.

Run from a TorchFuser checkout with its venv, on a machine with an OpenCL GPU (NVIDIA: the CUDA driver's
OpenCL ICD, e.g. `apt-get install nvidia-opencl-icd` or the driver's libnvidia-opencl, and
ocl-icd-libopencl1; `clinfo -l` should list the GPU):

    .venv/bin/python -m torchfuser.check_gpu_gemm                 # first OpenCL GPU (or TORCHFUSER_DEVICE)
    .venv/bin/python -m torchfuser.check_gpu_gemm --quick         # fewer, smaller shapes
    .venv/bin/python -m torchfuser.check_gpu_gemm --pretend-gpu --quick   # dry run on a CPU device (PoCL)

For every shape and every GPU candidate variant (the tiled configurations and the strided fallback) it
reports: whether the variant fits the device (work-group size, local memory, the built kernel's own
work-group limit), the max error against a float64 reference next to torch.mm's own fp32 error, and
kernel time (OpenCL profiling events, median) as GFLOP/s next to torch.mm on CPU tensors. Then it compiles
a Linear+GELU block with the autotuner on and prints the tuning record. Exit status 1 if any variant that
ran computed a wrong result, or the compiled block disagrees with eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import pyopencl as cl
import torch

import torchfuser
from torchfuser.ir.kernels import GemmKernel
from torchfuser.ir.program import ProgramBuilder
from torchfuser.runtime import gemm_launch
from torchfuser.runtime.call import Call, Runtime
from torchfuser.runtime.device import Device, get_device
from torchfuser.runtime.kernel_cache import KernelBuildError

# shapes: (M, K, N, weight transposed as a Linear's, batch)
FULL = [
    (1024, 1024, 1024, True, 1), (4096, 4096, 4096, True, 1), (2048, 768, 3072, True, 1),
    (2048, 3072, 768, True, 1), (8192, 768, 768, False, 1), (1, 4096, 4096, True, 1),
    (127, 769, 1001, True, 1), (777, 129, 65, False, 1), (256, 64, 256, False, 48),
]
QUICK = [(256, 256, 256, True, 1), (127, 769, 129, True, 1), (33, 65, 17, False, 3)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="TORCHFUSER_DEVICE-style choice (P:D or part of a name)")
    parser.add_argument("--quick", action="store_true", help="three small shapes")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--pretend-gpu", action="store_true", help="treat a CPU device as a GPU (dry run)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TORCHFUSER_CACHE_DIR", tempfile.mkdtemp(prefix="tf-gpu-check-"))
    if args.pretend_gpu:
        Device.type_name = property(lambda self: "GPU")
    device = get_device(args.device)
    if device is None:
        print("no OpenCL device")
        return 2
    print(f"device: {device.name} | {device.platform} | driver {device.cl_device.driver_version} | "
          f"type {device.type_name} | zero-copy {device.zero_copy}")
    if device.type_name == "CPU":
        print("this is a CPU device: the GPU schedules are not its candidates (use --pretend-gpu for a dry run)")
        return 2
    limits = gemm_launch.device_limits(device)
    print(f"limits: {limits.max_group} items per group {limits.max_items}, {limits.local_bytes} bytes local memory")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads for torch.mm")

    failures = check_variants(device, QUICK if args.quick else FULL, args.reps)
    failures += check_compiled_block(device, args.quick)
    print("\nFAILED:\n  " + "\n  ".join(failures) if failures else "\nall checks passed")
    return 1 if failures else 0


def epilogues():
    plain = ProgramBuilder(["float32"])
    plain_program = plain.build([0])
    fused = ProgramBuilder(["float32"] * 3)  # gelu(acc + bias) + residual
    value = fused.emit("gelu", (fused.emit("add", (0, 1), "float32"),), "float32")
    return {"mm": plain_program, "bias+gelu+residual": fused.build([fused.emit("add", (value, 2), "float32")])}


def operands(m, k, n, transposed, batch):
    lead = (batch,) if batch > 1 else ()
    a = torch.randn(*lead, m, k)
    b = torch.randn(*lead, n, k).transpose(-2, -1) if transposed else torch.randn(*lead, k, n)
    return a, b / k**0.5, torch.randn(n), torch.randn(*lead, m, n)


def reference(name, a, b, bias, residual, dtype):
    acc = torch.matmul(a.to(dtype), b.to(dtype))
    if name == "mm":
        return acc
    return torch.nn.functional.gelu(acc + bias.to(dtype)) + residual.to(dtype)


def check_variants(device, shapes, reps) -> list[str]:
    runtime = Runtime.for_device(device)
    limits = gemm_launch.device_limits(device)
    failures = []
    for name, program in epilogues().items():
        kernel = GemmKernel(program, group=0)
        gemm_launch.gemm_state(kernel).limits = limits
        for m, k, n, transposed, batch in shapes:
            a, b, bias, residual = operands(m, k, n, transposed, batch)
            inputs = [a, b] if name == "mm" else [a, b, bias, residual]
            flops = 2.0 * batch * m * n * k
            exact = reference(name, a, b, bias, residual, torch.float64)
            cpu = reference(name, a, b, bias, residual, torch.float32)
            cpu_err = (cpu.double() - exact).abs().max().item()
            cpu_s = time_it(lambda: reference(name, a, b, bias, residual, torch.float32), reps)
            scale = exact.abs().max().item() or 1.0
            print(f"\n{name} M={m} K={k} N={n} batch={batch} B {'transposed' if transposed else 'row-major'}: "
                  f"torch.mm (CPU) {flops / cpu_s / 1e9:8.1f} GFLOP/s, fp32 max err {cpu_err:.2e}")
            for variant in gemm_launch.candidate_variants(device):
                label = f"  {variant.name:<24}"
                why = gemm_launch.misfit(variant, limits)
                if why:
                    print(f"{label} does not fit: {why}")
                    continue
                launch = gemm_launch.launch_for(kernel, variant, inputs)
                try:
                    (built,), _ = runtime.build(launch.spec)
                except KernelBuildError as error:
                    failures.append(f"{name} {m}x{k}x{n} {variant.name}: build failed")
                    print(f"{label} BUILD FAILED\n{error.log[-2000:]}")
                    continue
                group = 1
                for size in launch.local_size or ():
                    group *= size
                allowed = built.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device.cl_device)
                if group > allowed:
                    print(f"{label} the built kernel allows {allowed} items per group, the launch needs {group}")
                    continue
                seconds, out = [], None
                for rep in range(reps + 1):
                    call = Call(runtime)
                    out = call.run_launch(launch, kernel, list(inputs))
                    call.sync()
                    if rep:  # the first call uploads the operands and warms up
                        seconds += [(e.profile.end - e.profile.start) * 1e-9 for _, e in call.events]
                err = (out.double() - exact).abs().max().item()
                ok = err == err and err <= 8 * cpu_err + 1e-6 * scale
                best = statistics.median(seconds)
                print(f"{label} {flops / best / 1e9:8.1f} GFLOP/s ({best * 1e3:8.3f} ms kernel), "
                      f"max err {err:.2e}{'' if ok else '  WRONG'}")
                if not ok:
                    failures.append(f"{name} {m}x{k}x{n} {variant.name}: max err {err:.2e} (torch.mm {cpu_err:.2e})")
    return failures


def time_it(fn, reps) -> float:
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def check_compiled_block(device, quick) -> list[str]:
    """The whole path: torchfuser.compile with the autotuner on; prints what it chose and why."""
    torch.manual_seed(0)
    width = 256 if quick else 768
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)).eval()
    x = torch.randn(4, 128, width)
    with torch.no_grad():
        compiled = torchfuser.compile(model, device=device.index, autotune=True)
        actual, expected = compiled(x), model(x)
        for _ in range(3):
            compiled(x)
        t0 = time.perf_counter()
        for _ in range(10):
            compiled(x)
        ours = (time.perf_counter() - t0) / 10
        t0 = time.perf_counter()
        for _ in range(10):
            model(x)
        eager = (time.perf_counter() - t0) / 10
    report = torchfuser.last_report()
    print(f"\ncompiled MLP block {tuple(x.shape)} width {width}: {ours * 1e3:.2f} ms per call "
          f"(eager on CPU {eager * 1e3:.2f} ms; includes host<->device copies)")
    for kernel in report.kernels:
        tuning = kernel.tuning or {}
        print(f"  {kernel.name} {kernel.spec.splitlines()[0]}\n    winner {tuning.get('winner')} "
              f"({tuning.get('source')}); candidates {tuning.get('candidates')}; rejected {tuning.get('rejected')}")
    err = (actual - expected).abs().max().item()
    print(f"  max err vs eager {err:.2e}")
    return [] if err <= 1e-3 else [f"compiled MLP block: max err {err:.2e} vs eager"]


if __name__ == "__main__":
    sys.exit(main())
