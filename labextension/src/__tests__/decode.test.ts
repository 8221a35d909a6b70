/**
 * Decoding schema v1 and v2 bundles into the view's model: the same graphs,
 * kernels and fallbacks either way; other versions refused with a message.
 */
import { describe, expect, it } from 'vitest';
import { decodeBundle } from '../view/decode';
import { ExplorerView } from '../view/explorer_view';
import { setLayoutEngine } from '../view/layout_engine';
import type { Graph, Report } from '../view/schema';
import { encodeV2 } from './encode_v2';
import { loadFixture, loadRepoFixture, stubGraphviz } from './fixtures';

const NODE_KEYS = ['id', 'op', 'target', 'label', 'shape', 'dtype', 'group', 'kernel', 'module', 'module_type', 'file', 'line', 'code'];
/** What may differ between two compiles of one model: times, cache state, launch counts and their estimates. */
const KERNEL_KEYS = ['name', 'node', 'kind', 'group', 'cache_key', 'source', 'spec', 'nodes', 'sources', 'tuning', 'transforms', 'lane'];

function pick(value: any, keys: string[]): any {
  return Object.fromEntries(keys.map(key => [key, value[key] ?? null]));
}

function graphView(graph: Graph | null): any {
  if (!graph) return null;
  return {
    nodes: graph.nodes.map(node => pick(node, NODE_KEYS)),
    edges: graph.edges,
    modules: Object.fromEntries(Object.entries(graph.modules)),
    drawnGroups: graph.nodes.map(node => [node.id, node.group])
  };
}

/** A report as the view sees it, without what legitimately differs between two compiles. */
function comparable(report: Report): any {
  return {
    title: report.title,
    graphs: { captured: graphView(report.graphs.captured), aten: graphView(report.graphs.aten) },
    passes: report.passes.map(p => ({
      name: p.name,
      enabled: p.enabled,
      modified: p.modified,
      stats: p.stats,
      before: graphView(p.graph_before),
      after: graphView(p.graph_after)
    })),
    kernels: report.kernels.map(k => pick(k, KERNEL_KEYS)),
    fallbacks: report.fallbacks.map(f => pick(f, ['op', 'node', 'reason', 'module', 'file', 'line', 'code']))
  };
}

describe('decoding schema v1 and v2', () => {
  const v1 = loadRepoFixture('gpt2_tiny_bundle_v1.json');

  it('a v2 encoding of the tiny GPT-2 v1 bundle decodes to the same model', () => {
    const fromV1 = decodeBundle(v1);
    const fromV2 = decodeBundle(encodeV2(v1));
    expect(fromV2.schema_version).toBe(2);
    expect(fromV2.pipeline).toEqual(fromV1.pipeline);
    expect(comparable(fromV2.reports[0])).toEqual(comparable(fromV1.reports[0]));
  });

  it('derives, for every decoded v2 graph, the DOT the v1 compiler stored', () => {
    const stored = decodeBundle(v1).reports[0];
    const derived = decodeBundle(encodeV2(v1)).reports[0];
    expect(derived.graphs.aten!.derived).toBe(true);
    expect(derived.graphs.aten!.dot).toBe(stored.graphs.aten!.dot);
    derived.passes.forEach((pass, i) => {
      expect(pass.graph_before?.dot).toBe(stored.passes[i].graph_before?.dot);
      expect(pass.graph_after?.dot).toBe(stored.passes[i].graph_after?.dot);
    });
  });

  it('the compiler\'s v2 bundle of the tiny GPT-2 gives the same graphs, kernels and fallbacks as its v1 bundle', () => {
    const fromV1 = decodeBundle(v1);
    const fromV2 = decodeBundle(loadRepoFixture('gpt2_tiny_bundle_v2.json'));
    expect(fromV2.pipeline).toEqual(fromV1.pipeline);
    expect(fromV2.reports.length).toBe(fromV1.reports.length);
    fromV2.reports.forEach((report, i) => {
      const [a, b] = [comparable(report), comparable(fromV1.reports[i])];
      a.passes.forEach((pass: any, j: number) => {
        expect(pass.before, `${pass.name}: graph before`).toEqual(b.passes[j].before);
        expect(pass.after, `${pass.name}: graph after`).toEqual(b.passes[j].after);
      });
      expect(a.graphs).toEqual(b.graphs);
      expect(a.kernels).toEqual(b.kernels);
      expect(a.fallbacks).toEqual(b.fallbacks);
    });
  });

  it('the compiler\'s v2 bundle derives, graph for graph, the DOT its v1 bundle stored', () => {
    const stored = decodeBundle(v1).reports[0];
    const derived = decodeBundle(loadRepoFixture('gpt2_tiny_bundle_v2.json')).reports[0];
    for (const key of ['captured', 'aten'] as const) {
      expect(derived.graphs[key]?.dot, key).toBe(stored.graphs[key]?.dot);
    }
    derived.passes.forEach((pass, i) => {
      expect(pass.graph_before?.dot, `before ${pass.name}`).toBe(stored.passes[i].graph_before?.dot);
      expect(pass.graph_after?.dot, `after ${pass.name}`).toBe(stored.passes[i].graph_after?.dot);
    });
  });
});

describe('decoding a hand-written v2 bundle', () => {
  const bundle = decodeBundle(loadFixture('small_v2_bundle.json'));
  const report = bundle.reports[0];
  const pass = (name: string) => report.passes.find(p => p.name === name)!;
  const ids = (graph: Graph | null) => graph?.nodes.map(n => n.id);

  it('resolves interned module paths and source lines on nodes', () => {
    const mm = report.graphs.aten!.nodes.find(n => n.id === 'mm')!;
    expect(mm).toMatchObject({ module: 'fc1', module_type: 'Linear', file: 'model.py', line: 12, code: 'x = self.fc1(x)' });
    const x = report.graphs.aten!.nodes[0];
    expect(x).toMatchObject({ module: '', module_type: '', file: null, line: null, code: null });
    expect(report.graphs.captured!.nodes.map(n => n.module)).toEqual(['', 'fc1', '']);
  });

  it('derives edges from inputs and module lists from nodes (a "__proto__" path stays a plain key)', () => {
    const aten = report.graphs.aten!;
    expect(aten.edges).toEqual([['w', 't'], ['x', 'mm'], ['t', 'mm'], ['mm', 'gelu'], ['gelu', 'cumsum'], ['cumsum', 'output']]);
    expect(Object.entries(aten.modules)).toEqual([
      ['', ['x', 'output']], ['fc1', ['w', 't', 'mm']], ['act', ['gelu']], ['__proto__', ['cumsum']]
    ]);
  });

  it('replays each change: removed, added and rewritten nodes at their indices', () => {
    expect(ids(pass('fuse_gemm_epilogue').graph_before)).toEqual(['x', 'w', 't', 'mm', 'gelu', 'cumsum', 'output']);
    expect(ids(pass('fuse_gemm_epilogue').graph_after)).toEqual(['x', 'w', 'tf_gemm_0', 'cumsum', 'output']);
    expect(pass('fuse_gemm_epilogue').graph_after!.edges).toContainEqual(['tf_gemm_0', 'cumsum']);
    // The next pass that ran starts from that graph; a rewritten node may just move.
    expect(ids(pass('fuse_pointwise').graph_before)).toEqual(['x', 'w', 'tf_gemm_0', 'cumsum', 'output']);
    expect(ids(pass('fuse_pointwise').graph_after)).toEqual(['w', 'x', 'tf_gemm_0', 'cumsum', 'output']);
  });

  it('draws fused nodes in their kernel\'s group on the graph before the pass and on the ATen graph', () => {
    const groups = (graph: Graph | null) => Object.fromEntries(graph!.nodes.map(n => [n.id, n.group]));
    expect(groups(pass('fuse_gemm_epilogue').graph_before)).toMatchObject({ t: 0, mm: 0, gelu: 0, cumsum: null });
    expect(groups(report.graphs.aten)).toMatchObject({ t: 0, mm: 0, gelu: 0, x: null });
    expect(report.graphs.aten!.dot).toContain('"mm" [id="mm", label="mm\\n[8, 32]", tooltip="aten.mm.default\\nfloat32[8, 32]\\nmodule fc1 (Linear)\\nmodel.py:12  x = self.fc1(x)", fillcolor="#8dd3c7"];');
  });

  it('leaves disabled and failed passes without graphs; a failure shows as stats.error, as in v1', () => {
    expect(pass('eliminate_dead_code')).toMatchObject({ enabled: false, graph_before: null, graph_after: null });
    const failed = pass('fuse_reductions');
    expect(failed).toMatchObject({ enabled: false, graph_before: null, graph_after: null, error: 'pass fuse_reductions failed: ValueError: boom <b>' });
    expect(failed.stats).toEqual({ error: 'pass fuse_reductions failed: ValueError: boom <b>' });
  });

  it('gives kernels their source and spec by cache key, and fallbacks their provenance', () => {
    expect(report.kernels.map(k => k.source)).toEqual(Array(2).fill('__kernel void tf_gemm_0(__global float* out) {}'));
    expect(report.kernels[0].spec).toBe('gemm M=8 N=32 K=16');
    expect(report.kernels[0].sources).toEqual([
      { module: 'fc1', module_type: 'Linear', file: 'model.py', line: 12, code: 'x = self.fc1(x)' },
      { module: 'act', module_type: 'GELU', file: 'model.py', line: 13, code: 'x = self.act(x)' }
    ]);
    expect(report.fallbacks).toEqual([
      { op: 'aten.cumsum.default', node: 'cumsum', reason: 'no OpenCL kernel for this op', module: '__proto__', file: 'model.py', line: 30, code: null }
    ]);
    expect(report).not.toHaveProperty('kernel_sources');
    expect(report).not.toHaveProperty('modules');
  });

  it('accepts a bare v2 report', () => {
    const bare = decodeBundle(loadFixture('small_v2_bundle.json').reports[0]);
    expect(bare.pipeline).toEqual(['fuse_gemm_epilogue', 'fuse_reductions', 'fuse_pointwise', 'eliminate_dead_code']);
    expect(ids(bare.reports[0].passes[0].graph_after)).toEqual(['x', 'w', 'tf_gemm_0', 'cumsum', 'output']);
  });
});

describe('refusing what it cannot read', () => {
  it('names the version it got and the ones it reads', () => {
    const future = { kind: 'torchfuser.explorer', schema_version: 3, pipeline: [], reports: [] };
    expect(() => decodeBundle(future)).toThrow('Unsupported TorchFuser report schema_version 3 (this view reads 1 and 2)');
    expect(() => decodeBundle({ schema_version: 7, passes: [] })).toThrow('schema_version 7');
  });

  it('says which pass holds a change it cannot apply', () => {
    const broken = loadFixture('small_v2_bundle.json');
    broken.reports[0].passes[0].change.added[0][0] = 99;
    expect(() => decodeBundle(broken)).toThrow(/Malformed TorchFuser report \(schema_version 2\): pass fuse_gemm_epilogue: node tf_gemm_0 is placed at index 99/);
    const noId = loadFixture('small_v2_bundle.json');
    noId.reports[0].graphs.aten.nodes[0].id = 5;
    expect(() => decodeBundle(noId)).toThrow(/graphs.aten: a node without a string id/);
  });
});

describe('the old v1 report fixture (tests/fixtures/mlp_report.json, a bare report)', () => {
  it('still decodes and renders', async () => {
    setLayoutEngine(stubGraphviz);
    try {
      const view = new ExplorerView({ interactive: false });
      document.body.appendChild(view.node);
      view.setBundle(loadRepoFixture('mlp_report.json'));
      await view.whenDrawn();
      const drawn = Array.from(document.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel'));
      expect(drawn.length).toBe(3);
      expect(document.querySelector('.jp-torchfuser-error')!.textContent).toBe('');
    } finally {
      setLayoutEngine(null);
      document.body.innerHTML = '';
    }
  });
});
