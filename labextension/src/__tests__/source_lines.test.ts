/**
 * Provenance both ways (#16), from the OpenCL side: the source pane draws a
 * kernel's source one .jp-torchfuser-source-line per line, naming in
 * data-nodes the graph nodes each line computes (the report's line_nodes);
 * choosing a line highlights those nodes in both panes (the fused node where
 * they are not drawn) and the user's lines they came from. On the tiny GPT-2
 * bundle (schema v2) with a map added to one of its kernels.
 */
import { describe, expect, it } from 'vitest';
import { MODULE_NODE_PREFIX } from '../view/collapse';
import { decodeBundle } from '../view/decode';
import type { ExplorerView } from '../view/explorer_view';
import { highlightOpenCLLines } from '../view/opencl_highlight';
import { loadRepoFixture, mountView, useStubbedLayout } from './fixtures';

const KERNEL = 'tf_gemm_25322c6416'; // covers addmm_1, view_9, add_2; drawn as tf_gemm_group2 after fusion
const HOSTILE_ID = '<img/src=x/onerror=window.__x=1>';
const LINE_NODES: Record<string, string[]> = { '3': ['addmm_1'], '5': ['addmm_1', 'add_2'], '7': ['view_9'], '9': [HOSTILE_ID] };
// The user lines (file:line) those nodes come from, as recorded in the bundle's locations.
const ADDMM_LINE = 'pytorch_utils.py:119';
const VIEW_LINE = 'pytorch_utils.py:120';
const RESIDUAL_LINE = 'modeling_gpt2.py:285';

declare global {
  interface Window {
    __x?: number;
  }
}

const q = (selector: string) => document.querySelector(selector);
const qa = (selector: string) => Array.from(document.querySelectorAll(selector));
const highlighted = (side: string) =>
  qa(`.jp-torchfuser-graph[data-side="${side}"] g.node.jp-torchfuser-highlight`).map(g => g.getAttribute('data-node-id')).sort();
const sourceLines = () => qa('.jp-torchfuser-source .jp-torchfuser-source-line');
const sourceLine = (n: number) => q(`.jp-torchfuser-source .jp-torchfuser-source-line[data-line="${n}"]`) as HTMLElement;
/** The highlighted user lines, by the end of their key: in the sidebar list, and in the source pane's "From your code". */
const userLinesOn = (where: string) =>
  qa(`${where} .jp-torchfuser-user-line.jp-torchfuser-highlight`).map(li => (li.getAttribute('data-line') ?? '').split('/').pop()).sort();

function bundleWithMap(lineNodes: Record<string, unknown> | null = LINE_NODES): any {
  const bundle = loadRepoFixture('gpt2_tiny_bundle_v2.json');
  const kernel = bundle.reports[0].kernels.find((k: any) => k.name === KERNEL);
  if (lineNodes) {
    kernel.line_nodes = lineNodes;
  }
  return bundle;
}

async function showKernel(bundle = bundleWithMap()): Promise<{ view: ExplorerView; source: string }> {
  const view = await mountView(bundle);
  view.selectKernel(KERNEL);
  return { view, source: view.report!.kernels.find(k => k.name === KERNEL)!.source };
}

useStubbedLayout();

describe('OpenCL source lines', () => {
  it('draw every line as a .jp-torchfuser-source-line, data-nodes naming what it computes', async () => {
    const { source } = await showKernel();
    const lines = sourceLines();
    const expected = source.replace(/\n$/, '').split('\n');
    expect(lines.map(l => l.getAttribute('data-line'))).toEqual(expected.map((_, i) => String(i + 1)));
    expect(lines.map(l => (l.textContent ?? '').replace(/\n$/, ''))).toEqual(expected);
    expect(q('.jp-torchfuser-opencl')!.textContent).toBe(source.replace(/\n$/, '')); // copying keeps the lines
    const named = Object.fromEntries(lines.filter(l => l.hasAttribute('data-nodes')).map(l => [l.getAttribute('data-line'), l.getAttribute('data-nodes')!.split(' ')]));
    expect(named).toEqual(LINE_NODES);
    expect(sourceLine(5).getAttribute('role')).toBe('button');
    expect(sourceLine(4).getAttribute('role')).toBeNull(); // unmapped: not a button
    expect(lines.some(l => l.querySelector('.jp-torchfuser-tok-keyword'))).toBe(true); // still highlighted
  });

  it('a click highlights the nodes of the line in both panes, and the user lines they came from', async () => {
    await showKernel();
    sourceLine(5).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(sourceLine(5).hasAttribute('data-selected')).toBe(true);
    expect(highlighted('before')).toEqual(['add_2', 'addmm_1']); // the ATen graph draws them
    expect(highlighted('after')).toEqual(['tf_gemm_group2']); // fused: the kernel's node stands for them
    expect(userLinesOn('.jp-torchfuser-sidebar')).toEqual([RESIDUAL_LINE, ADDMM_LINE].sort());
    expect(userLinesOn('.jp-torchfuser-source')).toEqual([RESIDUAL_LINE, ADDMM_LINE].sort());
    // The kernel stays selected.
    expect(q('g[data-node-id="tf_gemm_group2"]')!.classList.contains('jp-torchfuser-selected')).toBe(true);

    // Enter on another line moves the choice.
    sourceLine(7).dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(sourceLines().filter(l => l.hasAttribute('data-selected'))).toEqual([sourceLine(7)]);
    expect(highlighted('before')).toEqual(['view_9']);
    expect(userLinesOn('.jp-torchfuser-sidebar')).toEqual([VIEW_LINE]);

    // A click on an unmapped line does nothing.
    sourceLine(4).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(highlighted('before')).toEqual(['view_9']);
    // Other controls in the pane keep their keys.
    const space = new KeyboardEvent('keydown', { key: ' ', bubbles: true, cancelable: true });
    q('.jp-torchfuser-spec summary')!.dispatchEvent(space);
    expect(space.defaultPrevented).toBe(false);
  });

  it('maps the nodes through collapsed modules, and keeps the choice across redraws', async () => {
    const { view } = await showKernel();
    sourceLine(3).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    view.setCollapsed(['h.0']);
    await view.whenDrawn();
    expect(highlighted('before')).toEqual([`${MODULE_NODE_PREFIX}h.0`]);
    expect(highlighted('after')).toEqual([`${MODULE_NODE_PREFIX}h.0`]);
    view.setCollapsed([]);
    await view.whenDrawn();
    expect(highlighted('before')).toEqual(['addmm_1']);
  });

  it('selecting another kernel or a node clears the line', async () => {
    const { view } = await showKernel();
    sourceLine(5).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    view.selectKernel('tf_gemm_1384143c57');
    expect(highlighted('before')).toEqual([]);
    expect(highlighted('after')).toEqual([]);
    expect(sourceLines().some(l => l.hasAttribute('data-selected'))).toBe(false);
    expect(userLinesOn('.jp-torchfuser-sidebar')).not.toContain(RESIDUAL_LINE); // the new kernel's own lines instead

    view.selectKernel(KERNEL);
    sourceLine(5).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    q('.jp-torchfuser-graph[data-side="before"] g.node[data-node-id="view_9"] text')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(highlighted('before')).toEqual([]);
    expect(userLinesOn('.jp-torchfuser-sidebar')).toEqual([]);
  });

  it('node ids are attribute text, never markup', async () => {
    await showKernel();
    expect(sourceLine(9).getAttribute('data-nodes')).toBe(HOSTILE_ID);
    sourceLine(9).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(q('.jp-torchfuser-view img')).toBeNull();
    expect(window.__x).toBeUndefined();
    // Not drawn anywhere: the kernel's node stands for it after fusion, nothing before.
    expect(highlighted('before')).toEqual([]);
    expect(highlighted('after')).toEqual(['tf_gemm_group2']);
  });

  it('a report without the map still draws its lines, none of them a button', async () => {
    const { source } = await showKernel(bundleWithMap(null));
    expect(sourceLines()).toHaveLength(source.replace(/\n$/, '').split('\n').length);
    expect(qa('.jp-torchfuser-source-line[data-nodes], .jp-torchfuser-source-line[role]')).toHaveLength(0);
  });
});

describe('decoding and splitting', () => {
  it('keeps only 1-based line keys with string ids', () => {
    // As JSON gives it: "__proto__" an own key, not the prototype.
    const bundle = bundleWithMap(JSON.parse('{"0": ["a"], "2": ["addmm_1", 7], "x": ["b"], "4": [], "5": "add_2", "__proto__": ["c"]}'));
    const kernel = decodeBundle(bundle).reports[0].kernels.find(k => k.name === KERNEL)!;
    expect(kernel.line_nodes).toEqual({ '2': ['addmm_1'] });
    expect(Object.getPrototypeOf(kernel.line_nodes)).toBe(Object.prototype);
    expect(decodeBundle(bundleWithMap(null)).reports[0].kernels.find(k => k.name === KERNEL)!.line_nodes).toBeUndefined();
  });

  it('expands runs of lines ("first-last", inclusive) into one key per line', () => {
    const bundle = bundleWithMap({ '3-5': ['addmm_1'], '7': ['add_2'], '9-8': ['x'], '2-': ['y'] });
    const kernel = decodeBundle(bundle).reports[0].kernels.find(k => k.name === KERNEL)!;
    expect(kernel.line_nodes).toEqual({ '3': ['addmm_1'], '4': ['addmm_1'], '5': ['addmm_1'], '7': ['add_2'] });
  });

  it('splits highlighted source into lines, a block comment staying a comment on each', () => {
    const lines = highlightOpenCLLines('/* a\n b */ int x;\nfloat y;\n');
    expect(lines).toHaveLength(3); // no empty line after the final newline
    const first = document.createElement('div');
    first.append(lines[0]);
    const second = document.createElement('div');
    second.append(lines[1]);
    expect(first.querySelector('.jp-torchfuser-tok-comment')!.textContent).toBe('/* a');
    expect(second.querySelector('.jp-torchfuser-tok-comment')!.textContent).toBe(' b */');
    expect(highlightOpenCLLines('')).toEqual([]);
  });
});
