import { describe, expect, it } from 'vitest';
import { buildDisplayGraph, collapseLevels, moduleEntries, modulesAtDepth, toDisplayed } from '../view/collapse';
import { dotQuote, nodeFillColors, parseAttributeList, tunedForSize, withGraphAttributes } from '../view/dot_text';
import { findCounterparts, GraphIndex, kernelForNode, kernelNodeIds } from '../view/graph_index';
import { decodeBundle } from '../view/decode';
import type { Graph } from '../view/schema';
import { matchNodes } from '../view/search';
import { loadFixture } from './fixtures';

const report = decodeBundle(loadFixture('mlp_bundle.json')).reports[0];
const gemmPass = report.passes[0];
const before = new GraphIndex(gemmPass.graph_before!);
const after = new GraphIndex(gemmPass.graph_after!);

describe('counterpart matching', () => {
  it('pairs a covered node with its kernel node (same group, kernel.nodes)', () => {
    expect(findCounterparts('addmm', before, after, report.kernels)).toEqual(new Set(['tf_gemm_0']));
    expect(findCounterparts('t_1', before, after, report.kernels)).toEqual(new Set(['tf_gemm_1']));
  });

  it('pairs a kernel node with every node it covers', () => {
    expect(findCounterparts('tf_gemm_0', after, before, report.kernels)).toEqual(new Set(['t', 'addmm', 'gelu']));
  });

  it('pairs untouched nodes by id, and pairs nothing for unknown ids', () => {
    expect(findCounterparts('cumsum', before, after, report.kernels)).toEqual(new Set(['cumsum']));
    expect(findCounterparts('arg0_1', after, before, report.kernels)).toEqual(new Set(['arg0_1']));
    expect(findCounterparts('nope', before, after, report.kernels).size).toBe(0);
  });

  it('uses the group alone when kernel.nodes is missing', () => {
    const kernels = report.kernels.map(k => ({ ...k, nodes: [] }));
    expect(findCounterparts('gelu', before, after, kernels)).toEqual(new Set(['tf_gemm_0']));
  });
});

describe('search', () => {
  const graph = gemmPass.graph_before!;
  it('matches op names, targets, module paths and module types', () => {
    expect(matchNodes(graph, 'addmm')).toEqual(new Set(['addmm', 'addmm_1']));
    expect(matchNodes(graph, 'aten.gelu')).toEqual(new Set(['gelu']));
    expect(matchNodes(graph, 'fc2')).toEqual(new Set(['p_fc2_weight', 'p_fc2_bias', 't_1', 'addmm_1']));
    expect(matchNodes(graph, 'GELU')).toEqual(new Set(['gelu']));
  });
  it('needs every term and ignores case; empty queries match nothing', () => {
    expect(matchNodes(graph, 'LINEAR addmm')).toEqual(new Set(['addmm', 'addmm_1']));
    expect(matchNodes(graph, '   ').size).toBe(0);
    expect(matchNodes(null, 'addmm').size).toBe(0);
  });
  it('finds kernel nodes by kernel name', () => {
    expect(matchNodes(gemmPass.graph_after!, 'tf_gemm')).toEqual(new Set(['tf_gemm_0', 'tf_gemm_1']));
  });
});

function nestedGraph(): Graph {
  const n = (id: string, module: string) => ({
    id, op: 'call_function', target: 'aten.add.Tensor', label: id, shape: null, dtype: null, group: null,
    kernel: null, module, module_type: module ? 'Block' : '', file: null, line: null, code: null
  });
  return {
    nodes: [n('x', ''), n('a', 'layers.0.attn'), n('b', 'layers.0.mlp'), n('c', 'layers.1.mlp'), n('out', '')],
    edges: [['x', 'a'], ['a', 'b'], ['b', 'c'], ['c', 'out']],
    modules: { 'layers.0.attn': ['a'], 'layers.0.mlp': ['b'], 'layers.1.mlp': ['c'] },
    dot: 'digraph G { rankdir=LR; "x" [id="x", fillcolor="#abcdef"]; }'
  };
}

describe('collapse by module', () => {
  it('lists every module path with its ancestors', () => {
    const entries = moduleEntries(nestedGraph());
    expect(entries.map(e => e.path)).toEqual(['layers', 'layers.0', 'layers.0.attn', 'layers.0.mlp', 'layers.1', 'layers.1.mlp']);
    expect(entries.find(e => e.path === 'layers.0')!.nodeIds.sort()).toEqual(['a', 'b']);
    expect(modulesAtDepth(entries, 0)).toEqual(['layers']);
    expect(collapseLevels(entries)).toEqual([
      { depth: 0, count: 1, example: 'layers' },
      { depth: 1, count: 2, example: 'layers.0' },
      { depth: 2, count: 3, example: 'layers.0.attn' }
    ]);
  });

  it('draws the compiler DOT unchanged when nothing is collapsed', () => {
    const graph = nestedGraph();
    expect(buildDisplayGraph(graph, new Set()).dot).toBe(graph.dot);
  });

  it('replaces a collapsed module by one box and reroutes edges', () => {
    const display = buildDisplayGraph(nestedGraph(), new Set(['layers.0']));
    expect(display.members.get('module:layers.0')!.sort()).toEqual(['a', 'b']);
    expect(display.dot).toContain('"x" -> "module:layers.0"');
    expect(display.dot).toContain('"module:layers.0" -> "c"');
    expect(display.dot).not.toMatch(/"module:layers.0" -> "module:layers.0"/);
    expect(display.dot).toContain('rankdir=LR');
    expect(display.dot).toContain('fillcolor="#abcdef"'); // compiler colour kept
    expect(toDisplayed(['a', 'c'], display)).toEqual(new Set(['module:layers.0', 'c']));
  });

  it('lets the outermost collapsed module win', () => {
    const display = buildDisplayGraph(nestedGraph(), new Set(['layers', 'layers.0.mlp']));
    expect([...display.members.keys()]).toEqual(['module:layers']);
  });

  it('keeps fused-group colours and kernel classes in its own DOT', () => {
    const graph = gemmPass.graph_after!;
    const display = buildDisplayGraph(graph, new Set(['fc2']));
    const colors = nodeFillColors(display.dot);
    expect(colors.get('tf_gemm_0')).toBe(nodeFillColors(graph.dot).get('tf_gemm_0'));
    expect(display.dot).toMatch(/"tf_gemm_0" \[.*class="jp-torchfuser-kernel"/);
  });
});

describe('DOT text', () => {
  it('quotes backslashes, quotes and newlines', () => {
    expect(dotQuote('a"b\\c\nd')).toBe('"a\\"b\\\\c\\nd"');
  });
  it('parses attribute lists with quoted values', () => {
    const attrs = parseAttributeList(' id="a b", label="x \\"y\\" ]", penwidth=2 ');
    expect(attrs.get('id')).toBe('a b');
    expect(attrs.get('label')).toBe('x "y" ]');
    expect(attrs.get('penwidth')).toBe('2');
  });
  it('skips brackets inside strings', () => {
    expect(nodeFillColors('digraph { "a" [id="a[0]", label="]", fillcolor="red"]; }').get('a[0]')).toBe('red');
  });
  it('adds layout settings after the first brace outside strings, only for large graphs', () => {
    expect(withGraphAttributes('digraph "a{b" { x; }', 'nslimit=2;')).toBe('digraph "a{b" { nslimit=2; x; }');
    expect(tunedForSize('digraph { x; }', 10)).toBe('digraph { x; }');
    expect(tunedForSize('digraph { x; }', 800)).toContain('mclimit=0.2;');
    expect(tunedForSize('digraph { x; }', 2000)).toContain('mclimit=0.1;');
  });
});

describe('kernel nodes named before codegen', () => {
  // The core may name a kernel node after its group (tf_gemm_group0) and the kernel record
  // after its cache key (tf_gemm_a2861…): the fused group ties them together.
  const renamed = decodeBundle(loadFixture('mlp_bundle.json')).reports[0];
  renamed.kernels = renamed.kernels.map(k => ({ ...k, name: `${k.name}_cachekey` }));
  const afterIndex = new GraphIndex(renamed.passes[0].graph_after!);
  const beforeIndex = new GraphIndex(renamed.passes[0].graph_before!);

  it('finds the kernel record and the kernel node through the group', () => {
    expect(kernelForNode(afterIndex.byId.get('tf_gemm_0'), renamed.kernels)?.name).toBe('tf_gemm_0_cachekey');
    expect(kernelNodeIds(afterIndex, renamed.kernels[1])).toEqual(['tf_gemm_1']);
    expect(findCounterparts('tf_gemm_0', afterIndex, beforeIndex, renamed.kernels)).toEqual(new Set(['t', 'addmm', 'gelu']));
  });
});
