/**
 * Big graphs stay interactive: a ~5,000-node report opens collapsed to the
 * module depth that fits the box budget, expands module by module, search
 * centres its matches, no DOT is laid out twice in a view's life, and what a
 * pass changed shows on the module boxes that hide the changed nodes.
 */
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { memberPaths, MODULE_NODE_PREFIX, moduleEntries } from '../view/collapse';
import { BOX_BUDGET, boxesAtDepth, initialCollapseDepth } from '../view/collapse_levels';
import { decodeBundle } from '../view/decode';
import { ExplorerView } from '../view/explorer_view';
import { setLayoutEngine } from '../view/layout_engine';
import { WHOLE_PIPELINE } from '../view/pass_list';
import { loadFixture, mountView, stubGraphviz } from './fixtures';
import { syntheticV2Bundle } from './synthetic_v2';

const LAYERS = 80;
const bundle = syntheticV2Bundle(LAYERS);

const q = (selector: string) => document.querySelector(selector);
const qa = (selector: string) => Array.from(document.querySelectorAll(selector));
const drawn = (side: string) => qa(`.jp-torchfuser-graph[data-side="${side}"] g.node`).map(g => g.getAttribute('data-node-id')!);
const click = (side: string, id: string) =>
  qa(`.jp-torchfuser-graph[data-side="${side}"] g.node`)
    .find(g => g.getAttribute('data-node-id') === id)!
    .querySelector('text')!
    .dispatchEvent(new MouseEvent('click', { bubbles: true }));

const mount = (value: unknown = bundle): Promise<ExplorerView> => mountView(value);

beforeAll(() => {
  // jsdom does not lay out SVG: measure the stub's boxes from their polygon points.
  (SVGElement.prototype as any).getBBox = function (this: SVGElement) {
    const points = (this.querySelector('polygon')?.getAttribute('points') ?? '0,0').split(/[\s,]+/).map(Number);
    const ys = points.filter((_, i) => i % 2 === 1);
    return { x: 0, y: Math.min(...ys), width: 80, height: Math.max(...ys) - Math.min(...ys) };
  };
});
beforeEach(() => {
  stubGraphviz.calls.length = 0;
  setLayoutEngine(stubGraphviz);
});
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('collapse depth chosen by size', () => {
  const report = decodeBundle(bundle).reports[0];
  const aten = report.graphs.aten!;

  it('the synthetic report is big, and its layers are modules like h.7.mlp.c_fc', () => {
    expect(aten.nodes.length).toBeGreaterThan(4500);
    expect(moduleEntries(aten).map(e => e.path)).toEqual(expect.arrayContaining(['h', 'h.7', 'h.7.mlp', 'h.7.mlp.c_fc']));
  });

  it('top-level weights go with the one module that reads them', () => {
    expect(memberPaths(aten).get('w_c_fc_7')).toBe('h.7.mlp.c_fc');
    expect(memberPaths(aten).get('wte_weight')).toBe('wte');
    expect(memberPaths(aten).has('output')).toBe(false);
  });

  it('picks the deepest depth within the box budget; small graphs are drawn whole', () => {
    expect(boxesAtDepth(aten, 1)).toBeLessThanOrEqual(BOX_BUDGET);
    expect(boxesAtDepth(aten, 2)).toBeGreaterThan(BOX_BUDGET);
    expect(initialCollapseDepth([aten, report.passes[0].graph_after])).toBe(1);
    const small = decodeBundle(loadFixture('small_v2_bundle.json')).reports[0];
    expect(initialCollapseDepth([small.graphs.aten, small.passes[0].graph_after])).toBeNull();
  });
});

describe('a 5,000-node report in the view', () => {
  it('opens collapsed to one box per layer on both sides, the level shown in the toolbar', async () => {
    await mount();
    for (const side of ['before', 'after']) {
      const ids = drawn(side);
      expect(ids.length).toBeLessThanOrEqual(BOX_BUDGET);
      expect(ids).toEqual(expect.arrayContaining(['module:h.0', 'module:h.79', 'module:wte', 'output']));
    }
    expect((q('select.jp-torchfuser-collapse-level') as HTMLSelectElement).value).toBe('1');
    // The full graph's DOT was never built for drawing: only collapsed drawings were laid out.
    expect(stubGraphviz.calls.every(dot => dot.length < 200_000)).toBe(true);
  });

  it('expands a layer to its nodes by a click on its box; other layers stay collapsed', async () => {
    const view = await mount();
    click('before', 'module:h.7');
    await view.whenDrawn();
    const ids = drawn('before');
    expect(ids).toEqual(expect.arrayContaining(['addmm_c_fc_7', 'w_c_fc_7', 'residual_mlp_7', 'module:h.6']));
    expect(ids).not.toContain('module:h.7');
    expect(drawn('after')).toContain('tf_pointwise_7');
  });

  it('expanding a module too big to draw whole shows its children collapsed', async () => {
    const view = await mount();
    view.setCollapsed(['h']);
    await view.whenDrawn();
    expect(drawn('before')).toContain('module:h');
    click('before', 'module:h');
    await view.whenDrawn();
    expect(drawn('before')).toEqual(expect.arrayContaining(['module:h.0', 'module:h.79']));
  });

  it('search centres the first match and Enter the next, zooming in to read it', async () => {
    const view = await mount();
    const before = q('.jp-torchfuser-graph[data-side="before"]')!;
    const svg = before.querySelector('svg')!;
    const fitted = svg.getAttribute('viewBox');
    view.search('residual_mlp', false);
    expect(before.getAttribute('data-focus')).toBe('module:h.0');
    const first = svg.getAttribute('viewBox');
    expect(first).not.toBe(fitted);
    view.search('residual_mlp', true);
    expect(before.getAttribute('data-focus')).toBe('module:h.1');
    expect(svg.getAttribute('viewBox')).not.toBe(first);
    expect(q('.jp-torchfuser-match-count')!.textContent).toBe(`${LAYERS} before · ${LAYERS} after`);
  });

  it('lays out each DOT once in the view\'s life, however often it is shown', async () => {
    const view = await mount();
    const firstDraw = view.layouts.layouts;
    view.selectPass('fuse_pointwise');
    await view.whenDrawn();
    view.selectPass(WHOLE_PIPELINE);
    await view.whenDrawn();
    view.selectPass('fuse_pointwise');
    await view.whenDrawn();
    expect(new Set(stubGraphviz.calls).size).toBe(stubGraphviz.calls.length);
    expect(view.layouts.layouts).toBe(stubGraphviz.calls.length);
    expect(view.layouts.layouts).toBeLessThanOrEqual(firstDraw + 2);
  });
});

describe('what a pass changed, on a collapsed graph (#16)', () => {
  const box = (side: string, id: string) =>
    qa(`.jp-torchfuser-graph[data-side="${side}"] g.node`).find(g => g.getAttribute('data-node-id') === id)!;
  const mark = (side: string, id: string) => {
    const g = box(side, id);
    return {
      change: g.getAttribute('data-change'),
      count: g.getAttribute('data-change-count'),
      title: g.querySelector('a')!.getAttributeNS('http://www.w3.org/1999/xlink', 'title')
    };
  };
  const changedIn = (side: string, change: string) =>
    qa(`.jp-torchfuser-graph[data-side="${side}"] g.node[data-change="${change}"]`).map(g => g.getAttribute('data-node-id'));

  it('marks a module box with what changed inside it, and each node once the box is expanded', async () => {
    const view = await mount();
    view.selectPass('fuse_pointwise');
    await view.whenDrawn();
    // Layer 7 lost its 8 GELU nodes and rewired the projection that read them; it gained the fused kernel.
    expect(mark('before', 'module:h.7')).toEqual({
      change: 'mixed', count: '9', title: 'h.7: click to expand\n9 nodes changed inside: 8 removed, 1 rewritten'
    });
    expect(mark('after', 'module:h.7')).toMatchObject({ change: 'mixed', count: '2' });
    // The pass changed nothing inside the embedding: its box stays unmarked, tooltip as it was.
    expect(mark('before', 'module:wte')).toEqual({ change: null, count: null, title: 'wte: click to expand' });
    click('before', 'module:h.7');
    await view.whenDrawn();
    expect(changedIn('before', 'removed')).toEqual(expect.arrayContaining(['gelu_mul_0_7', 'gelu_tanh_5_7']));
    expect(changedIn('before', 'rewritten')).toContain('view_mlp_proj_7');
    expect(changedIn('after', 'added')).toContain('tf_pointwise_7');
    expect(box('before', 'gelu_mul_0_7').hasAttribute('data-change-count')).toBe(false);
    expect(mark('before', 'module:h.6').count).toBe('9');
  });

  it('a box whose changed nodes share one kind takes that kind', async () => {
    const view = await mount();
    view.selectPass('fuse_pointwise');
    await view.whenDrawn();
    // Layer 7 drawn but for its GELU, which holds only removed nodes before and the added kernel after.
    const otherBoxes = drawn('before').filter(id => id.startsWith(MODULE_NODE_PREFIX) && id !== 'module:h.7');
    view.setCollapsed([...otherBoxes.map(id => id.slice(MODULE_NODE_PREFIX.length)), 'h.7.mlp.act']);
    await view.whenDrawn();
    expect(mark('before', 'module:h.7.mlp.act')).toMatchObject({ change: 'removed', count: '8' });
    expect(mark('after', 'module:h.7.mlp.act')).toEqual({
      change: 'added', count: '1', title: 'h.7.mlp.act: click to expand\n1 node added inside'
    });
    // Shown as themselves, the rewired projection is marked with no count.
    expect(box('before', 'view_mlp_proj_7').getAttribute('data-change')).toBe('rewritten');
    expect(box('before', 'view_mlp_proj_7').hasAttribute('data-change-count')).toBe(false);
    view.selectPass(WHOLE_PIPELINE);
    await view.whenDrawn();
    expect(qa('g.node[data-change], g.node[data-change-count]')).toHaveLength(0);
  });
});

describe('a v2 report in the view', () => {
  it('draws, shows kernel source from kernel_sources, and a failed pass with its error as text', async () => {
    const view = await mount(loadFixture('small_v2_bundle.json'));
    expect(drawn('after')).toEqual(['w', 'x', 'tf_gemm_0', 'cumsum', 'output']);
    click('after', 'tf_gemm_0');
    expect(q('.jp-torchfuser-source')!.textContent).toContain('__kernel void tf_gemm_0');
    const row = q('li[data-pass-row="fuse_reductions"]')!;
    expect(row.getAttribute('data-state')).toBe('failed');
    expect(row.textContent).toContain('boom <b>');
    view.selectPass('fuse_reductions');
    await view.whenDrawn();
    expect(q('.jp-torchfuser-graph[data-side="after"]')!.textContent).toContain('failed, so the graph was compiled without it');
    expect(document.querySelector('.jp-torchfuser-view b')).toBeNull();
  });
});
