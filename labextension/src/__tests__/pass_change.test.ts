/**
 * What a pass changed: v2 stores it, v1 is diffed; both versions of the tiny
 * GPT-2 report must mark the same nodes. In the view, a click on a pass row
 * marks them in the panes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeBundle } from '../view/decode';
import { setLayoutEngine } from '../view/layout_engine';
import { changedNothing, diffGraphs, longestIncreasing, passChange } from '../view/pass_change';
import type { Graph, GraphNode } from '../view/schema';
import { loadFixture, loadRepoFixture, mountView, stubGraphviz } from './fixtures';

function node(id: string, label = id): GraphNode {
  return { id, op: 'call_function', target: id, label, shape: null, dtype: null, group: null, kernel: null, module: '', module_type: '', file: null, line: null, code: null };
}

function graph(nodes: GraphNode[], edges: [string, string][] = []): Graph {
  return { nodes, edges, modules: {}, dot: '' };
}

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('pass change', () => {
  it('finds one longest increasing run', () => {
    expect([...longestIncreasing([0, 3, 1, 2, 4])].sort()).toEqual([0, 2, 3, 4]);
    expect(longestIncreasing([]).size).toBe(0);
  });

  it('diffs two graphs: removed, added, changed and moved nodes', () => {
    const before = graph([node('a'), node('b'), node('c'), node('d')], [['a', 'b']]);
    const after = graph([node('a'), node('d'), node('b', 'b changed'), node('e'), node('c')], [['a', 'b']]);
    // d moved ahead of b and c: the longest kept order is a, b, c, so d is the one rewritten.
    expect(diffGraphs(before, after)).toEqual({ removed: [], added: ['e'], rewritten: ['d', 'b'] });
    const rewired = graph([node('a'), node('b')], [['b', 'a']]);
    expect(diffGraphs(graph([node('a'), node('b')]), rewired)).toEqual({ removed: [], added: [], rewritten: ['a'] });
    expect(diffGraphs(before, graph([node('a')]))).toEqual({ removed: ['b', 'c', 'd'], added: [], rewritten: [] });
  });

  it('agrees between the v1 diff and v2 stored change on the tiny GPT-2 bundle', () => {
    const v1 = decodeBundle(loadRepoFixture('gpt2_tiny_bundle_v1.json'));
    const v2 = decodeBundle(loadRepoFixture('gpt2_tiny_bundle_v2.json'));
    const passes1 = v1.reports[0].passes;
    const passes2 = v2.reports[0].passes;
    expect(passes1.map(p => p.name)).toEqual(passes2.map(p => p.name));
    let changed = 0;
    passes1.forEach((pass, i) => {
      expect(passes2[i].change).toBeTruthy(); // stored, not derived
      expect(passChange(pass)).toEqual(passChange(passes2[i]));
      changed += changedNothing(passChange(pass)) ? 0 : 1;
    });
    expect(changed).toBe(5); // merge_sibling_gemms changed nothing in this model
  });
});

describe('pass change in the view', () => {
  const mount = mountView;

  const marked = (side: string, change: string) =>
    Array.from(document.querySelectorAll(`.jp-torchfuser-graph[data-side="${side}"] g.node[data-change="${change}"]`)).map(g =>
      g.getAttribute('data-node-id')
    );

  for (const fixture of ['gpt2_tiny_bundle_v1.json', 'gpt2_tiny_bundle_v2.json']) {
    it(`a click on a pass row marks what it removed, rewrote and added (${fixture})`, async () => {
      const view = await mount(loadRepoFixture(fixture));
      const expected = passChange(view.report!.passes.find(p => p.name === 'fuse_attention'))!;
      const row = document.querySelector('.jp-torchfuser-pass[data-pass="fuse_attention"] .jp-torchfuser-pass-counts')!;
      row.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      await view.whenDrawn();
      expect(document.querySelector('.jp-torchfuser-pass[data-pass="fuse_attention"]')!.hasAttribute('data-selected')).toBe(true);
      expect(marked('before', 'removed').sort()).toEqual([...expected.removed].sort());
      expect(marked('before', 'rewritten').sort()).toEqual([...expected.rewritten].sort());
      expect(marked('after', 'added').sort()).toEqual([...expected.added].sort());
      expect(expected.removed.length + expected.added.length).toBeGreaterThan(0);
      // The whole pipeline marks nothing.
      view.selectPass('__pipeline__');
      await view.whenDrawn();
      expect(document.querySelectorAll('g.node[data-change]')).toHaveLength(0);
    });
  }

  it('hides passes that changed nothing when asked, and lists what a pass left unfused', async () => {
    await mount(loadFixture('history_bundle.json'));
    const rows = () => Array.from(document.querySelectorAll<HTMLElement>('.jp-torchfuser-pass[data-pass]')).filter(r => !r.hidden);
    const all = rows().length;
    const hide = document.querySelector('input.jp-torchfuser-hide-unchanged') as HTMLInputElement;
    hide.checked = true;
    hide.dispatchEvent(new Event('change', { bubbles: true }));
    expect(rows().map(r => r.getAttribute('data-pass'))).toEqual(['fuse_gemm_epilogue']);
    hide.checked = false;
    hide.dispatchEvent(new Event('change', { bubbles: true }));
    expect(rows()).toHaveLength(all);
    const unfused = document.querySelector('.jp-torchfuser-pass[data-pass="fuse_gemm_epilogue"] details.jp-torchfuser-unfused')!;
    expect(unfused.querySelector('summary')!.textContent).toBe('1 left unfused');
    expect(unfused.querySelector('li')!.textContent).toBe('mm_1: the GEMM kernel takes float32 operands only');
  });

  it('keeps a failed pass in view when hiding passes that changed nothing', async () => {
    const bundle = loadFixture('history_bundle.json');
    Object.assign(bundle.reports[0].passes[1], { error: 'RuntimeError: boom', change: null, modified: false });
    await mount(bundle);
    const hide = document.querySelector('input.jp-torchfuser-hide-unchanged') as HTMLInputElement;
    hide.checked = true;
    hide.dispatchEvent(new Event('change', { bubbles: true }));
    const shown = Array.from(document.querySelectorAll<HTMLElement>('.jp-torchfuser-pass[data-pass]')).filter(r => !r.hidden);
    expect(shown.map(r => r.getAttribute('data-pass'))).toEqual(['fuse_attention', 'fuse_gemm_epilogue']);
  });
});
