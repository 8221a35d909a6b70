"""Transformer-block workloads for `python -m torchfuser.bench`: a Hugging Face GPT2Block and a LLaMA decoder
layer (GQA, RMSNorm, RoPE, SwiGLU), random weights built locally (nothing downloaded), eval mode, no grad,
against eager, inductor and inductor+freezing, with torchfuser's share of the FLOP bound. Beside the times: the kernels torchfuser launches per call and the ATen ops eager
runs, what stays in PyTorch, and the kernels that take the time (profiled, from the CompileReports)."""

from __future__ import annotations

import importlib.util
import time
from collections import Counter

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchfuser
from torchfuser.runtime.timing import LEAD_SECONDS, interleaved_medians
from torchfuser.tools.bench.peers import against_peers, slower_flag, times_columns, times_head
from torchfuser.tools.bench.gemm import count_flops, flop_bound_share

# Both blocks at GPT-2 small's width; LLaMA's intermediate is ~8/3 of the width, as SwiGLU models size it.
FULL = {"width": 768, "heads": 12, "kv_heads": 4, "intermediate": 2048, "batch": 8, "seq": 128}
# fp32 in and out; GEMMs accumulate in another order than MKL, attention uses an online softmax.
RTOL = ATOL = 1e-4
PROFILED_CALLS = 5  # back-to-back calls whose kernels the table's per-kernel times are read from


def gpt2_block(width: int, heads: int, seq: int, **_) -> nn.Module:
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = GPT2Config(n_embd=width, n_head=heads, n_positions=max(seq, 64), n_layer=1)
    config._attn_implementation = "sdpa"  # what GPT2Model picks by default; a bare block would run "eager"
    return GPT2Block(config, layer_idx=0)


class LlamaLayer(nn.Module):
    """One LlamaDecoderLayer driven as LlamaModel drives it: position ids and the rotary cos/sin computed from
    the hidden states, no mask (with sdpa and no padding LlamaModel passes None: the kernel's is_causal)."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, hidden_states):
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        return self.layer(hidden_states, attention_mask=None, position_ids=position_ids,
                          position_embeddings=position_embeddings)


def llama_layer(width: int, heads: int, kv_heads: int, intermediate: int, seq: int, **_) -> nn.Module:
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=width, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=intermediate, num_hidden_layers=1, max_position_embeddings=max(seq, 64))
    config._attn_implementation = "sdpa"  # LlamaModel's default
    return LlamaLayer(config)


BLOCKS = {"gpt2": gpt2_block, "llama": llama_layer}


def hf_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


class _CountOps(TorchDispatchMode):
    """Counts the ATen ops that reach the CPU kernels (after autograd, so composites like linear arrive
    decomposed into t + addmm, as eager runs them)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func] += 1
        return func(*args, **(kwargs or {}))


def eager_op_counts(fn) -> tuple[int, int]:
    """(all ATen ops, ops that are not views) one eager call dispatches."""
    with _CountOps() as counter:
        fn()
    views = sum(n for op, n in counter.ops.items() if op.is_view)
    total = sum(counter.ops.values())
    return total, total - views


@torch.no_grad()
def block_row(name: str, repeats: int, inductor: bool, alone: bool = False, **shape) -> dict:
    """One block of BLOCKS at FULL's shape updated by `shape` (see module_row), with its shape."""
    shape = {**FULL, **shape}
    torch.manual_seed(0)
    block = BLOCKS[name](**shape).eval()
    x = torch.randn(shape["batch"], shape["seq"], shape["width"])
    return {**module_row(name, block, x, repeats, inductor, alone=alone), "shape": shape}


@torch.no_grad()
def module_row(name: str, module: nn.Module, x: torch.Tensor, repeats: int, inductor: bool,
               rtol: float = RTOL, atol: float = ATOL, alone: bool = False) -> dict:
    """torchfuser checked against eager, then the peers and torchfuser timed interleaved (steady state);
    launches, fallbacks and per-kernel times from the CompileReports of the graphs Dynamo captured; the GEMM
    FLOPs of a call and the bytes of the module's parameters, for the bounds. alone: eager and torchfuser also
    each timed on their own (no other candidate between their blocks to evict their weights from the caches
    or leave OpenMP threads spinning), as a program calling only one of them runs."""
    with torchfuser.collect_reports() as reports:
        fused = torchfuser.compile(module)
        actual = _hidden(fused(x))
    expected = _hidden(module(x))
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    plans = [r.plan for r in reports if r.plan is not None]
    for plan in plans:  # count one call's launches, then keep steady-state profiles only
        plan.stats.clear()
    fused(x)
    launches = sum(s.launches for plan in plans for s in plan.stats.values())
    eager_ops, eager_compute_ops = eager_op_counts(lambda: module(x))

    flops = count_flops(module, x)
    kernels = []  # profiled seconds per call: a kernel may launch more or less than once a call

    def profile_back_to_back():
        """Kernel times from back-to-back calls after the rounds, as a program calling the model in a loop runs
        it. The calls the rounds happened to profile (the first 20 among them) often ran right after another
        candidate's, its OpenMP threads still spinning: they summed to up to 1.7x the median call. Profiled
        before the rounds, a decode's split launches were still finding their cuts (new work-group functions)."""
        lead_end = time.perf_counter() + LEAD_SECONDS
        fused(x)  # the switch from the last candidate (as a timed block's lead): not counted
        while time.perf_counter() < lead_end:
            fused(x)
        for plan in plans:
            plan.stats.clear()
            plan.profile_next(PROFILED_CALLS)
        first_call = {id(plan): plan.calls for plan in plans}
        for _ in range(PROFILED_CALLS):
            fused(x)
        for report in reports:
            calls = max(1, report.plan.calls - first_call[id(report.plan)]) if report.plan is not None else 1
            for k in report.expanded()["kernels"]:  # with provenance resolved (sources as dicts)
                if k["mean_seconds"] is not None:
                    kernels.append({"name": k["name"], "kind": k["kind"], "per_call": k["seconds"] / calls,
                                    "variant": (k["tuning"] or {}).get("winner"), "fuses": _fuses(k)})
        kernels.sort(key=lambda k: k["per_call"], reverse=True)

    medians = against_peers(module, (x,), fused, repeats, inductor, then=profile_back_to_back)
    on_their_own = {}
    if alone:
        for way, fn in (("eager", lambda: module(x)), ("torchfuser", lambda: fused(x))):
            on_their_own[way] = interleaved_medians({way: fn}, repeats=repeats)[way]

    return {
        "name": name, "medians": medians, "max_error": (actual - expected).abs().max().item(),
        "graphs": len(reports), "launches": launches, "eager_ops": eager_ops, "eager_compute_ops": eager_compute_ops,
        "fallbacks": dict(Counter(f.op.removeprefix("aten.") for r in reports for f in r.fallbacks)),
        "kernel_seconds": sum(k["per_call"] for k in kernels), "top": kernels[:5],
        "extern_gemms": sum(k["variant"] == "extern" for k in kernels), "flops": flops,
        "param_bytes": sum(p.numel() * p.element_size() for p in module.parameters()), "alone": on_their_own,
    }


def _hidden(output):
    """transformers 4.x blocks return a tuple that starts with the hidden states; 5.x the tensor itself."""
    return output[0] if isinstance(output, tuple) else output


def _fuses(kernel: dict) -> str:
    """Where a kernel comes from: its first module (last two path parts) and the ops it covers, views left out."""
    modules = [s["module"] for s in kernel["sources"] if s["module"]]
    where = ".".join(modules[0].split(".")[-2:]) if modules else ""
    ops = [n for n in kernel["nodes"] if not n.startswith(("view", "getitem", "_unsafe_view"))]
    text = f"{where}: {' '.join(ops)}" if where else " ".join(ops)
    return text if len(text) <= 48 else text[:45] + "..."


def _describe(row: dict) -> str:
    """A transformer block's shape, or a model's input shape."""
    if "input" in row:
        return "input " + "x".join(map(str, row["input"]))
    s = row["shape"]
    return (f"{s['batch']}x{s['seq']}x{s['width']}, {s['heads']} heads"
            + (f", {s['kv_heads']} kv heads, intermediate {s['intermediate']}" if row["name"] == "llama" else ""))


def format_blocks(rows: list[dict], ceiling: float | None = None) -> str:
    head = (f"{'block':<12}{times_head()}{'% FLOP bound':>14}{'kernels':>9}{'eager ops':>11}{'in PyTorch':>12}"
            f"{'kernel ms':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        share = flop_bound_share(r["flops"], r["medians"]["torchfuser"], ceiling)
        lines.append(
            f"{r['name']:<12}{times_columns(r['medians'])}{(100 * share if share else float('nan')):>13.0f}%"
            f"{r['launches']:>9}{r['eager_compute_ops']:>5} ({r['eager_ops']:>3}){sum(r['fallbacks'].values()):>12}"
            f"{r['kernel_seconds'] * 1e3:>11.2f}{slower_flag(r['medians'])}")
    for r in rows:
        lines.append(f"\n{r['name']} ({_describe(r)}; {r['flops'] / 1e9:.2f} GFLOP; max |torchfuser - eager| "
                     f"{r['max_error']:.1e}, {r['graphs']} graph(s))")
        fallbacks = ", ".join(f"{op} x{n}" for op, n in sorted(r["fallbacks"].items())) or "none"
        lines.append(f"  in PyTorch: {fallbacks}")
        host = r["medians"]["torchfuser"] - r["kernel_seconds"]
        lines.append(f"  host time (median call - kernel time): {max(host, 0) * 1e3:.2f} ms: the BLAS of "
                     f"{r['extern_gemms']} [extern] GEMM(s), ops in PyTorch, launching")
        lines.append(f"  top kernels by profiled time per call ({r['kernel_seconds'] * 1e3:.2f} ms in all):")
        for k in r["top"]:
            variant = f" [{k['variant']}]" if k["variant"] else ""
            lines.append(f"    {k['per_call'] * 1e3:>7.2f} ms {100 * k['per_call'] / r['kernel_seconds']:>4.0f}%  "
                         f"{k['kind']:<10}{k['fuses']}{variant}")
    lines += [
        "\n'% FLOP bound': (GEMM FLOPs / FMA ceiling) / torchfuser's time; FLOPs from torch.utils.flop_counter"
        " (matmuls only: attention and elementwise work uncounted, so the bound is slightly low).",
        "'kernels': OpenCL launches in one torchfuser call. 'eager ops': ATen ops one eager call dispatches,",
        "  counted with a TorchDispatchMode (after autograd: linear arrives as t + addmm), views left out; all ops",
        "  in brackets. 'in PyTorch': ops of the compiled graphs that run in PyTorch, views left out. 'kernel ms':",
        "  mean profiled kernel time per timed call, all kernels summed (an [extern] GEMM's host BLAS part is not",
        f"  in it). torchfuser was checked against eager first: assert_close rtol={RTOL:g} atol={ATOL:g} (fp32).",
    ]
    return "\n".join(lines)
