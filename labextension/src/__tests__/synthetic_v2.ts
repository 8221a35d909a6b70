/**
 * Test helper: a GPT-like schema v2 bundle of any size. Each layer `h.<i>`
 * has LayerNorms, attention and an MLP (module paths like h.7.mlp.c_fc) with
 * its weights as top-level placeholders, as in a real ATen graph; one pass
 * fuses each layer's GELU chain into a pointwise kernel. About 60 nodes a
 * layer. (tests/ui/big_bundle.py builds the same shape for the browser test.)
 */
interface Builder {
  modules: [string, string][];
  moduleIndex: Map<string, number>;
  nodes: any[];
}

function moduleOf(b: Builder, path: string, type: string): number {
  const key = `${path}\u0000${type}`;
  if (!b.moduleIndex.has(key)) {
    b.moduleIndex.set(key, b.modules.length);
    b.modules.push([path, type]);
  }
  return b.moduleIndex.get(key)!;
}

function add(b: Builder, id: string, target: string, inputs: string[], path = '', type = '', op = 'call_function'): string {
  b.nodes.push({
    id, op, target, label: target.split('.').slice(-2, -1)[0] ?? target, shape: [1, 64, 768], dtype: 'float32',
    group: null, kernel: null, inputs, module: moduleOf(b, path, type), location: path ? 0 : null
  });
  return id;
}

function weight(b: Builder, id: string): string {
  return add(b, id, id, [], '', '', 'placeholder');
}

function linear(b: Builder, i: number, name: string, x: string, path: string): string {
  const w = weight(b, `w_${name}_${i}`);
  const bias = weight(b, `b_${name}_${i}`);
  const v = add(b, `view_${name}_${i}`, 'aten.view.default', [x], path, 'Conv1D');
  const mm = add(b, `addmm_${name}_${i}`, 'aten.addmm.default', [bias, v, w], path, 'Conv1D');
  return add(b, `view_out_${name}_${i}`, 'aten.view.default', [mm], path, 'Conv1D');
}

function layerNorm(b: Builder, i: number, name: string, x: string, path: string): string {
  const w = weight(b, `w_${name}_${i}`);
  const bias = weight(b, `b_${name}_${i}`);
  const mean = add(b, `mean_${name}_${i}`, 'aten.mean.dim', [x], path, 'LayerNorm');
  const sub = add(b, `sub_${name}_${i}`, 'aten.sub.Tensor', [x, mean], path, 'LayerNorm');
  const variance = add(b, `var_${name}_${i}`, 'aten.var.correction', [x], path, 'LayerNorm');
  const rsqrt = add(b, `rsqrt_${name}_${i}`, 'aten.rsqrt.default', [variance], path, 'LayerNorm');
  const mul = add(b, `mul_${name}_${i}`, 'aten.mul.Tensor', [sub, rsqrt], path, 'LayerNorm');
  const scaled = add(b, `scale_${name}_${i}`, 'aten.mul.Tensor', [mul, w], path, 'LayerNorm');
  return add(b, `shift_${name}_${i}`, 'aten.add.Tensor', [scaled, bias], path, 'LayerNorm');
}

const GELU_OPS = ['mul', 'pow', 'mul', 'add', 'mul', 'tanh', 'add', 'mul'];

function layer(b: Builder, i: number, x: string): { out: string; gelu: string[]; geluInput: string } {
  const p = `h.${i}`;
  const ln1 = layerNorm(b, i, 'ln_1', x, `${p}.ln_1`);
  const qkv = linear(b, i, 'c_attn', ln1, `${p}.attn.c_attn`);
  let a = qkv;
  for (const [k, op] of ['split', 'permute', 'transpose', 'bmm', 'div', 'softmax', 'bmm', 'permute', 'clone', 'view'].entries()) {
    a = add(b, `attn_${op}_${k}_${i}`, `aten.${op}.default`, k === 3 ? [a, qkv] : [a], `${p}.attn`, 'GPT2Attention');
  }
  const proj = linear(b, i, 'attn_proj', a, `${p}.attn.c_proj`);
  const res1 = add(b, `residual_attn_${i}`, 'aten.add.Tensor', [proj, x], p, 'GPT2Block');
  const ln2 = layerNorm(b, i, 'ln_2', res1, `${p}.ln_2`);
  const fc = linear(b, i, 'c_fc', ln2, `${p}.mlp.c_fc`);
  const gelu: string[] = [];
  let g = fc;
  for (const [k, op] of GELU_OPS.entries()) {
    g = add(b, `gelu_${op}_${k}_${i}`, `aten.${op}.Tensor`, [g], `${p}.mlp.act`, 'NewGELUActivation');
    gelu.push(g);
  }
  const down = linear(b, i, 'mlp_proj', g, `${p}.mlp.c_proj`);
  return { out: add(b, `residual_mlp_${i}`, 'aten.add.Tensor', [down, res1], p, 'GPT2Block'), gelu, geluInput: fc };
}

export function syntheticV2Bundle(layers: number): any {
  const b: Builder = { modules: [], moduleIndex: new Map(), nodes: [] };
  moduleOf(b, '', '');
  const ids = weight(b, 'input_ids');
  let x = add(b, 'embedding', 'aten.embedding.default', [weight(b, 'wte_weight'), ids], 'wte', 'Embedding');
  const fusedLayers: { gelu: string[]; geluInput: string }[] = [];
  for (let i = 0; i < layers; i++) {
    const built = layer(b, i, x);
    x = built.out;
    fusedLayers.push(built);
  }
  const out = layerNorm(b, 0, 'ln_f', x, 'ln_f');
  add(b, 'output', 'output', [out], '', '', 'output');
  const aten = b.nodes;
  // fuse_pointwise: each GELU chain becomes one kernel node where the chain started.
  const removed = fusedLayers.flatMap(l => l.gelu);
  const gone = new Set(removed);
  const after: any[] = [];
  const added: [number, any][] = [];
  const rewritten: [number, any][] = [];
  const fusedInto: Record<string, number> = {};
  const kernelOf = new Map<string, string>();
  const placed = new Set<string>();
  fusedLayers.forEach((l, i) => l.gelu.forEach(id => { fusedInto[id] = i; kernelOf.set(id, `tf_pointwise_${i}`); }));
  for (const node of aten) {
    if (gone.has(node.id)) {
      const kernel = kernelOf.get(node.id)!;
      if (!placed.has(kernel)) {
        placed.add(kernel);
        const i = fusedInto[node.id];
        const k = { ...node, id: kernel, target: kernel, label: kernel, group: i, kernel, inputs: [fusedLayers[i].geluInput] };
        added.push([after.length, k]);
        after.push(k);
      }
      continue;
    }
    const inputs = node.inputs.map((id: string) => kernelOf.get(id) ?? id);
    if (inputs.some((id: string, k: number) => id !== node.inputs[k])) {
      const changed = { ...node, inputs };
      rewritten.push([after.length, changed]);
      after.push(changed);
    } else {
      after.push(node);
    }
  }
  const cacheKey = 'ab'.repeat(32);
  const report = {
    schema_version: 2, torchfuser_version: '0.2.0', title: `synthetic GPT (${layers} layers)`, device: null,
    modules: b.modules, locations: [['model.py', 1, 'h = block(h)']],
    graphs: { captured: null, aten: { nodes: aten, fused_into: fusedInto } },
    passes: [
      { name: 'fuse_pointwise', enabled: true, modified: true, seconds: 0.01, stats: { nodes_before: aten.length, nodes_after: after.length },
        error: null, change: { removed, added, rewritten, fused_into: fusedInto } }
    ],
    kernel_sources: { [cacheKey]: { source: '__kernel void tf_pointwise_gelu(__global float* out) {}', spec: 'pointwise gelu' } },
    kernels: fusedLayers.map((l, i) => ({
      name: 'tf_pointwise_gelu', node: `tf_pointwise_${i}`, kind: 'pointwise', group: i, cache_key: cacheKey, cache: i ? 'hit' : 'miss',
      build_seconds: 0, launches: 0, seconds: 0, mean_seconds: null, nodes: l.gelu, sources: [[moduleOf(b, `h.${i}.mlp.act`, 'NewGELUActivation'), 0]],
      tuning: null, transforms: [], lane: 'inline', lane_reason: ''
    })),
    fallbacks: [],
    timings: { calls: 0, eager_seconds: null, compiled_seconds: null, speedup: null, kernel_seconds: null, host_overhead_seconds: null },
    memory: {}, dynamic: null, recompile_reason: null
  };
  return { kind: 'torchfuser.explorer', schema_version: 2, pipeline: ['fuse_pointwise'], reports: [report] };
}
