"""A GPT-like explorer bundle in schema v2 with about 5,000 nodes, for the browser tests of big graphs.

Each layer `h.<i>` has two LayerNorms, attention and an MLP, with module paths like `h.7.mlp.c_fc`; weights
are top-level placeholders, as in a real ATen graph. One pass, fuse_pointwise, fuses each layer's GELU chain
into a kernel (all of them share one kernel source). 58 nodes a layer, 13 outside the layers.
(labextension/src/__tests__/synthetic_v2.ts builds the same shape for the unit tests.)
"""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "torchfuser" / "report" / "report.schema.json"
GELU_OPS = ("mul", "pow", "mul", "add", "mul", "tanh", "add", "mul")
ATTENTION_OPS = ("split", "permute", "transpose", "bmm", "div", "softmax", "bmm", "permute", "clone", "view")
NODES_PER_LAYER = 58
NODES_OUTSIDE_LAYERS = 13


class _Graph:
    def __init__(self):
        self.modules: list[list[str]] = [["", ""]]
        self._module_index = {("", ""): 0}
        self.nodes: list[dict] = []

    def module(self, path: str, kind: str) -> int:
        key = (path, kind)
        if key not in self._module_index:
            self._module_index[key] = len(self.modules)
            self.modules.append([path, kind])
        return self._module_index[key]

    def add(self, node_id: str, target: str, inputs: list[str], path: str = "", kind: str = "",
            op: str = "call_function") -> str:
        label = target.split(".")[-2] if target.count(".") >= 2 else target
        self.nodes.append({"id": node_id, "op": op, "target": target, "label": label, "shape": [1, 64, 768],
                           "dtype": "float32", "group": None, "kernel": None, "inputs": inputs,
                           "module": self.module(path, kind), "location": 0 if path else None})
        return node_id

    def weight(self, node_id: str) -> str:
        return self.add(node_id, node_id, [], op="placeholder")

    def linear(self, i: int, name: str, x: str, path: str) -> str:
        w, b = self.weight(f"w_{name}_{i}"), self.weight(f"b_{name}_{i}")
        v = self.add(f"view_{name}_{i}", "aten.view.default", [x], path, "Conv1D")
        mm = self.add(f"addmm_{name}_{i}", "aten.addmm.default", [b, v, w], path, "Conv1D")
        return self.add(f"view_out_{name}_{i}", "aten.view.default", [mm], path, "Conv1D")

    def layer_norm(self, i: int, name: str, x: str, path: str) -> str:
        w, b = self.weight(f"w_{name}_{i}"), self.weight(f"b_{name}_{i}")
        mean = self.add(f"mean_{name}_{i}", "aten.mean.dim", [x], path, "LayerNorm")
        sub = self.add(f"sub_{name}_{i}", "aten.sub.Tensor", [x, mean], path, "LayerNorm")
        var = self.add(f"var_{name}_{i}", "aten.var.correction", [x], path, "LayerNorm")
        rsqrt = self.add(f"rsqrt_{name}_{i}", "aten.rsqrt.default", [var], path, "LayerNorm")
        mul = self.add(f"mul_{name}_{i}", "aten.mul.Tensor", [sub, rsqrt], path, "LayerNorm")
        scaled = self.add(f"scale_{name}_{i}", "aten.mul.Tensor", [mul, w], path, "LayerNorm")
        return self.add(f"shift_{name}_{i}", "aten.add.Tensor", [scaled, b], path, "LayerNorm")

    def layer(self, i: int, x: str) -> tuple[str, str, list[str]]:
        """(output, the GELU chain's input, the GELU chain's node ids)"""
        p = f"h.{i}"
        qkv = self.linear(i, "c_attn", self.layer_norm(i, "ln_1", x, f"{p}.ln_1"), f"{p}.attn.c_attn")
        a = qkv
        for k, op in enumerate(ATTENTION_OPS):
            a = self.add(f"attn_{op}_{k}_{i}", f"aten.{op}.default", [a, qkv] if k == 3 else [a], f"{p}.attn",
                         "GPT2Attention")
        res1 = self.add(f"residual_attn_{i}", "aten.add.Tensor", [self.linear(i, "attn_proj", a, f"{p}.attn.c_proj"), x],
                        p, "GPT2Block")
        fc = self.linear(i, "c_fc", self.layer_norm(i, "ln_2", res1, f"{p}.ln_2"), f"{p}.mlp.c_fc")
        g, gelu = fc, []
        for k, op in enumerate(GELU_OPS):
            g = self.add(f"gelu_{op}_{k}_{i}", f"aten.{op}.Tensor", [g], f"{p}.mlp.act", "NewGELUActivation")
            gelu.append(g)
        down = self.linear(i, "mlp_proj", g, f"{p}.mlp.c_proj")
        return self.add(f"residual_mlp_{i}", "aten.add.Tensor", [down, res1], p, "GPT2Block"), fc, gelu


def _fuse_gelu(aten: list[dict], layers: list[tuple[str, list[str]]]) -> tuple[dict, int]:
    """fuse_pointwise's change: each GELU chain → one kernel node where the chain began. (change, nodes after)"""
    kernel_of, fused_into = {}, {}
    for i, (_, gelu) in enumerate(layers):
        for node_id in gelu:
            kernel_of[node_id], fused_into[node_id] = f"tf_pointwise_{i}", i
    after, added, rewritten, placed = [], [], [], set()
    for node in aten:
        if node["id"] in kernel_of:
            kernel = kernel_of[node["id"]]
            if kernel not in placed:
                placed.add(kernel)
                i = fused_into[node["id"]]
                fused = {**node, "id": kernel, "target": kernel, "label": kernel, "group": i, "kernel": kernel,
                         "inputs": [layers[i][0]]}
                added.append([len(after), fused])
                after.append(fused)
            continue
        inputs = [kernel_of.get(x, x) for x in node["inputs"]]
        if inputs != node["inputs"]:
            node = {**node, "inputs": inputs}
            rewritten.append([len(after), node])
        after.append(node)
    removed = [node_id for _, gelu in layers for node_id in gelu]
    return {"removed": removed, "added": added, "rewritten": rewritten, "fused_into": fused_into}, len(after)


def big_bundle(layers: int = 86) -> dict:
    """A schema v2 bundle of `layers` GPT-2 blocks: 58 * layers + 13 nodes (86 layers: 5,001)."""
    graph = _Graph()
    ids = graph.weight("input_ids")
    x = graph.add("embedding", "aten.embedding.default", [graph.weight("wte_weight"), ids], "wte", "Embedding")
    fused_layers = []
    for i in range(layers):
        x, gelu_input, gelu = graph.layer(i, x)
        fused_layers.append((gelu_input, gelu))
    graph.add("output", "output", [graph.layer_norm(0, "ln_f", x, "ln_f")], op="output")
    aten = graph.nodes
    change, nodes_after = _fuse_gelu(aten, fused_layers)
    fused_into = change["fused_into"]
    cache_key = "ab" * 32
    kernels = [{
        "name": "tf_pointwise_gelu", "node": f"tf_pointwise_{i}", "kind": "pointwise", "group": i,
        "cache_key": cache_key, "cache": "hit" if i else "miss", "build_seconds": 0.0, "launches": 0, "seconds": 0.0,
        "mean_seconds": None, "nodes": gelu, "sources": [[graph.module(f"h.{i}.mlp.act", "NewGELUActivation"), 0]],
        "tuning": None, "transforms": [], "lane": "inline", "lane_reason": "",
    } for i, (_, gelu) in enumerate(fused_layers)]
    report = {
        "schema_version": 2, "torchfuser_version": "0.2.0", "title": f"synthetic GPT-2, {layers} layers",
        "device": None, "modules": graph.modules, "locations": [["model.py", 1, "h = block(h)"]],
        "graphs": {"captured": None, "aten": {"nodes": aten, "fused_into": fused_into}},
        "passes": [{"name": "fuse_pointwise", "enabled": True, "modified": True, "seconds": 0.01,
                    "stats": {"nodes_before": len(aten), "nodes_after": nodes_after}, "error": None,
                    "change": change}],
        "kernel_sources": {cache_key: {"source": "__kernel void tf_pointwise_gelu(__global float* out) {}",
                                       "spec": "pointwise gelu"}},
        "kernels": kernels, "fallbacks": [],
        "timings": {"calls": 0, "eager_seconds": None, "compiled_seconds": None, "speedup": None,
                    "kernel_seconds": None, "host_overhead_seconds": None},
        "memory": {}, "dynamic": None, "recompile_reason": None,
    }
    return {"kind": "torchfuser.explorer", "schema_version": 2, "pipeline": ["fuse_pointwise"], "reports": [report]}


def validate(bundle: dict) -> None:
    """Raises jsonschema.ValidationError unless `bundle` follows report.schema.json."""
    import jsonschema

    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(bundle)


if __name__ == "__main__":
    bundle = big_bundle()
    validate(bundle)
    print(len(bundle["reports"][0]["graphs"]["aten"]["nodes"]), "nodes,", len(json.dumps(bundle)) // 1024, "KiB")
