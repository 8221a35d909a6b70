// A synthetic CompileReport with a large graph, for the layout speed check.
// Shaped like a transformer stack: per layer, weight placeholders feeding a
// chain of ops with residual edges; groups of four ops fuse into one kernel.
const PALETTE = ['#8dd3c7', '#ffffb3', '#bebada', '#fb8072', '#80b1d3', '#fdb462', '#b3de69', '#fccde5'];
const quote = s => '"' + String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"';

function makeNode(id, op, target, module, group, kernel) {
  return {
    id, op, target, label: kernel ?? target.replace(/^aten\./, '').replace(/\.default$|\.Tensor$/, ''),
    shape: [8, 768], dtype: 'float32', group, kernel, module, module_type: module ? 'Block' : '',
    file: 'model.py', line: 10, code: 'x = block(x)'
  };
}

function toGraph(nodes, edges) {
  const modules = {};
  for (const n of nodes) if (n.module) (modules[n.module] ??= []).push(n.id);
  const lines = ['digraph G {', ' rankdir=TB;', ' node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=11];'];
  for (const n of nodes) {
    const attrs = [`id=${quote(n.id)}`, `label=${quote(n.label)}`, `tooltip=${quote(n.module)}`];
    if (n.group !== null) attrs.push(`fillcolor=${quote(PALETTE[n.group % PALETTE.length])}`);
    if (n.kernel) attrs.push('class="jp-torchfuser-kernel"', 'penwidth=2');
    lines.push(` ${quote(n.id)} [${attrs.join(', ')}];`);
  }
  for (const [a, b] of edges) lines.push(` ${quote(a)} -> ${quote(b)};`);
  lines.push('}');
  return { nodes, edges, modules, dot: lines.join('\n') };
}

export function syntheticBundle(totalNodes = 2000) {
  const ops = ['aten.addmm.default', 'aten.gelu.default', 'aten.mul.Tensor', 'aten.add.Tensor', 'aten.native_layer_norm.default', 'aten.view.default'];
  const nodes = [makeNode('x', 'placeholder', 'x', '', null, null)];
  const edges = [];
  let previous = 'x';
  let group = 0;
  let i = 0;
  const chain = [];
  while (nodes.length < totalNodes - 1) {
    const layer = Math.floor(i / 40);
    const module = `layers.${layer}.${i % 40 < 20 ? 'attn' : 'mlp'}`;
    const id = `op_${i}`;
    const g = i % 5 === 4 ? null : group;
    nodes.push(makeNode(id, 'call_function', ops[i % ops.length], module, g, null));
    edges.push([previous, id]);
    if (i % 10 === 9 && chain.length > 7) edges.push([chain[chain.length - 7], id]);
    if (i % 5 === 0 && nodes.length < totalNodes - 1) {
      const weight = `w_${i}`;
      nodes.push(makeNode(weight, 'placeholder', weight, module, null, null));
      edges.push([weight, id]);
    }
    if (i % 5 === 4) group++;
    chain.push(id);
    previous = id;
    i++;
  }
  nodes.push(makeNode('output', 'output', 'output', '', null, null));
  edges.push([previous, 'output']);
  const before = toGraph(nodes, edges);

  // Fuse each group into one kernel node.
  const representative = new Map();
  const afterNodes = [];
  const kernels = [];
  for (const n of nodes) {
    if (n.group === null) {
      representative.set(n.id, n.id);
      afterNodes.push(n);
      continue;
    }
    const name = `tf_pointwise_${n.group}`;
    representative.set(n.id, name);
    let kernel = kernels.find(k => k.name === name);
    if (!kernel) {
      kernel = {
        name, kind: 'pointwise', group: n.group, cache_key: '00'.repeat(32), cache: n.group % 3 === 0 ? 'miss' : 'hit',
        source: `__kernel void ${name}(__global float* x) { x[get_global_id(0)] *= 2.0f; }`, build_seconds: 0.01,
        launches: 1, seconds: 2e-6, mean_seconds: 2e-6, spec: 'PointwiseSpec()', nodes: [], sources: []
      };
      kernels.push(kernel);
      afterNodes.push(makeNode(name, 'call_function', name, n.module, n.group, name));
    }
    kernel.nodes.push(n.id);
  }
  const seen = new Set();
  const afterEdges = [];
  for (const [a, b] of edges) {
    const ra = representative.get(a);
    const rb = representative.get(b);
    const key = ra + '>' + rb;
    if (ra !== rb && !seen.has(key)) {
      seen.add(key);
      afterEdges.push([ra, rb]);
    }
  }
  const after = toGraph(afterNodes, afterEdges);
  const report = {
    schema_version: 1, torchfuser_version: '0.1.0', title: `synthetic ${nodes.length}-node graph`, device: null,
    graphs: { captured: null, aten: before },
    passes: [{ name: 'fuse_pointwise', enabled: true, modified: true, seconds: 0.01, stats: { nodes_before: nodes.length, nodes_after: afterNodes.length }, graph_before: before, graph_after: after }],
    kernels, fallbacks: [],
    timings: { calls: 1, eager_seconds: 0.01, compiled_seconds: 0.005, speedup: 2 }
  };
  return { kind: 'torchfuser.explorer', schema_version: 1, pipeline: ['fuse_pointwise'], reports: [report] };
}
