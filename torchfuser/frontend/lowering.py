"""The lowering of a torch-level graph to core ATen, and compiling once per input signature.

Where gradients are needed, lowering goes through aot_autograd (`aot_module_simplified`): it functionalises,
decomposes to core ATen, keeps node provenance (stack_trace, nn_module_stack) and hands over a backward
graph that takes the same passes. Inference graphs (no input needs a gradient) are traced to core ATen
directly, functionalised the same way (mutations of inputs become copies back into them at the end), and
the compiled plan is what Dynamo calls: aot_autograd's runtime wrappers would cost more per call than a
small graph's kernels. Ops a pass wants whole (passes.kept_ops: silu, SDPA) are not decomposed.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
from torch._decomp import core_aten_decompositions
from torch._dispatch.python import enable_python_dispatcher
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize
from torch.nn.utils.stateless import _reparametrize_module

from torchfuser.driver import compile_aten_graph
from torchfuser.frontend.graph_breaks import graph_break_of
from torchfuser.frontend.input_names import name_dynamo_inputs, name_inputs
from torchfuser.ir.aten import WEIGHT
from torchfuser.options import Options
from torchfuser.passes import kept_ops
from torchfuser.report.snapshot import snapshot_graph


def decompositions() -> dict:
    """Core ATen's decompositions, less the ops some pass fuses whole (the same table while the passes' kept
    ops are the same: building it costs tens of milliseconds per graph)."""
    return _decompositions_keeping(kept_ops())


@functools.lru_cache(maxsize=8)
def _decompositions_keeping(keep: frozenset) -> dict:
    return {op: fn for op, fn in core_aten_decompositions().items() if op not in keep}


class _Lowerer(fx.Interpreter):
    """Runs the torch-level graph node by node under make_fx (preserve_node_meta sees each node), computing
    `linear` on a batch of rows with a bias as addmm over the rows flattened, as ATen's own composite does,
    but keeping symbolic sizes: the composite reads them as numbers there (before functionalisation and the
    decomposition table), which would fix a dynamic sequence length to the example's."""

    def call_function(self, target, args, kwargs):
        if target in LINEARS and len(args) >= 2 and set(kwargs) <= {"bias"}:
            x, weight, *rest = args
            bias = rest[0] if rest else kwargs.get("bias")
            if bias is not None and x.dim() >= 3:
                out = torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight.t())
                return out.view(*x.shape[:-1], weight.shape[0])
        return super().call_function(target, args, kwargs)


LINEARS = (torch._C._nn.linear, torch.nn.functional.linear)


def lower_and_compile(gm, example_inputs, options: Options, *, title="graph", fakes=None, recompile_reason=None):
    """torch-level gm → core ATen → compiled plan(s); returns what Dynamo (or compile_fx) calls. fakes: the
    inputs to trace with instead of example_inputs (symbolic_inputs: one plan for every size; inference);
    recompile_reason: why Dynamo compiles this frame again, for the report."""
    started = time.perf_counter()
    input_names, graph_break = name_dynamo_inputs(gm), graph_break_of(gm)
    captured = snapshot_graph(gm)
    if not needs_autograd(example_inputs):
        state = module_state(gm)
        aten_gm = lower_for_inference(gm, state, example_inputs, fakes)
        name_inputs(aten_gm, [*state, *input_names])
        compiled = compile_aten_graph(aten_gm, options, title=f"{title} forward", captured=captured, started=started,
                                      recompile_reason=recompile_reason, graph_break=graph_break)
        run, lifted = compiled.plan.run, list(state.values())

        def call(*args):  # Dynamo's guards (or compiled_per_signature's key) fix the inputs' layouts
            return run(lifted + list(args) if lifted else args, True)

        call.compiled = compiled
        return call

    def compiler_for(kind):
        def compile_graph(aten_gm, aten_inputs):
            if kind == "forward":  # its inputs: the lifted module state, then the graph's
                name_inputs(aten_gm, [*module_state(gm), *input_names])
            compiled = compile_aten_graph(aten_gm, options, title=f"{title} {kind}", captured=captured,
                                          started=started, recompile_reason=recompile_reason, graph_break=graph_break)
            run = compiled.plan.run
            trusted = kind == "forward"  # Dynamo's guards (or compiled_per_signature's key) fix its input layouts

            def boxed(args):  # aot_autograd's boxed convention (one list in) is what Plan.run takes
                return run(args, trusted)

            boxed._boxed_call = True
            boxed.compiled = compiled
            return boxed

        return compile_graph

    return aot_module_simplified(gm, list(example_inputs), fw_compiler=compiler_for("forward"),
                                 bw_compiler=compiler_for("backward"), decompositions=decompositions())


def symbolic_inputs(example_inputs) -> list:
    """Dynamo's fake tensors for its example inputs, with the sizes it made dynamic as symbols (the tracing
    context remembers each input's symbolic context), so that the graph traced from them keeps them."""
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    context = torch._guards.TracingContext.try_get()
    fakes = []
    for t in example_inputs:
        if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
            symbolic = context.tensor_to_context.get(t) if context is not None else None
            t = fake_mode.from_tensor(t, symbolic_context=symbolic, source=getattr(symbolic, "tensor_source", None))
        fakes.append(t)
    return fakes


def needs_autograd(example_inputs) -> bool:
    """Gradients will flow through the graph (or an input is a tensor subclass aot_autograd must unwrap)."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if any(type(t) not in (torch.Tensor, torch.nn.Parameter, FakeTensor) for t in tensors):
        return True
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def module_state(gm: fx.GraphModule) -> dict:
    """The tensors gm holds (parameters, buffers, tensor constants it reads): lifted to graph inputs, as
    aot_autograd lifts them (Dynamo's graphs usually take their parameters as inputs already)."""
    state = {**dict(gm.named_parameters(remove_duplicate=False)), **dict(gm.named_buffers(remove_duplicate=False))}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in state:
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            if isinstance(value, torch.Tensor):
                state[node.target] = value
    return state


def lower_for_inference(gm: fx.GraphModule, state: dict, example_inputs, fakes=None) -> fx.GraphModule:
    """The core-ATen graph of gm with its state lifted to the first inputs, functionalised, traced on fake
    tensors (Dynamo's own fake mode when it has one; `fakes` in place of example_inputs where given), each
    node keeping the meta of the node it came from."""
    fake_mode = torch._guards.detect_fake_mode(example_inputs) or FakeTensorMode()
    fakes = [fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) else t
             for t in [*state.values(), *(example_inputs if fakes is None else fakes)]]
    names = list(state)

    def run(*args):
        with _reparametrize_module(gm, dict(zip(names, args[: len(names)]))):
            return _Lowerer(gm).run(*args[len(names):])

    with fake_mode, enable_python_dispatcher(), fx_traceback.preserve_node_meta():
        traced = make_fx(functionalize(run, remove="mutations"), decomposition_table=decompositions(),
                         record_module_stack=True)(*fakes)
    traced.graph.eliminate_dead_code()  # make_fx keeps what nothing reads (unused results of multi-output ops)
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    for node, source in zip(placeholders, [*state.values(), *example_inputs]):
        if isinstance(source, torch.nn.Parameter):
            node.meta[WEIGHT] = True  # passes may treat it as a constant of the model (passes/merge_sibling_gemms)
    return _without_inner_aliases(_without_inner_mutations(traced))


def _without_inner_mutations(gm: fx.GraphModule) -> fx.GraphModule:
    """A decomposition below functionalisation can leave an in-place op on an intermediate (rms_norm with a
    weight adds eps with `add_`). On a fresh tensor, not an input and not a view, its out-of-place form
    computes the same, and whatever reads the tensor after the op reads the new value instead."""
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    rewritten = False
    for node in list(gm.graph.nodes):
        functional = _functional_form(node)
        mutated = node.args[0] if node.args else None
        if functional is None or not isinstance(mutated, fx.Node) or mutated.op != "call_function":
            continue
        if not _fresh(mutated) or any(not _fresh(u) for u in mutated.users if u is not node):
            continue  # a view or an in-place result, or a view of it: the mutation would reach another tensor
        node.target = functional
        for user in list(mutated.users):
            if user is not node and position[user] > position[node]:
                user.replace_input_with(mutated, node)
        rewritten = True
    if rewritten:
        gm.recompile()
    return gm


def _fresh(node: fx.Node) -> bool:
    """The node is an ATen op whose result aliases none of its inputs."""
    return isinstance(node.target, torch._ops.OpOverload) and not any(
        r.alias_info is not None for r in node.target._schema.returns)


def _functional_form(node: fx.Node):
    """aten.add.Scalar for aten.add_.Scalar: the out-of-place overload of an in-place ATen op, else None."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    name = target._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_") or not target._schema.is_mutable:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _without_inner_aliases(gm: fx.GraphModule) -> fx.GraphModule:
    """Functionalisation leaves `alias` nodes (e.g. behind a torch.tensor constant) that aot_autograd's graphs do
    not have; in a graph with no mutations they are the value itself, and they would split fusion groups.
    An alias the graph returns stays: eager returns a new tensor object there."""
    outputs = {n for node in gm.graph.nodes if node.op == "output" for n in node.all_input_nodes}
    aliases = [n for n in gm.graph.nodes if n.target is torch.ops.aten.alias.default and n not in outputs]
    for node in aliases:
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    if aliases:
        gm.recompile()
    return gm


def input_signature(args) -> tuple:
    """What a shape-specialised compile depends on: each tensor's shape, strides, dtype and grad flag, other
    values (the compiled plan trusts its inputs' layouts to be these)."""
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.requires_grad) if isinstance(a, torch.Tensor) else a
                 for a in args)


def compiled_per_signature(compile_for):
    """A callable that compiles `compile_for(args)` at the first call with each new input signature."""
    compiled: dict = {}

    def run(*args):
        key = input_signature(args)
        if key not in compiled:
            compiled[key] = compile_for(list(args))
        return compiled[key](*args)

    return run
