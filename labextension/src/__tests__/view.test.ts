import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ExplorerView, type ViewHost } from '../view/explorer_view';
import { setLayoutEngine } from '../view/layout_engine';
import { loadFixture, mountView, stubGraphviz } from './fixtures';

const mount = (fixture = 'mlp_bundle.json', host: ViewHost = { interactive: true }) =>
  mountView(loadFixture(fixture), host);

const q = (selector: string) => document.querySelector(selector);
const qa = (selector: string) => Array.from(document.querySelectorAll(selector));
const nodeIds = (side: string) => qa(`.jp-torchfuser-graph[data-side="${side}"] g.node`).map(g => g.getAttribute('data-node-id'));

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('explorer view: DOT → panes', () => {
  it('draws both graphs of the whole pipeline by default', async () => {
    await mount();
    expect(q('.jp-torchfuser-view')).not.toBeNull();
    expect(nodeIds('before')).toContain('addmm');
    expect(nodeIds('after')).toEqual(expect.arrayContaining(['tf_gemm_0', 'tf_gemm_1', 'tf_pointwise_2', 'cumsum']));
    expect(qa('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel')).toHaveLength(3);
  });

  it('moves Graphviz ids to data-node-id so they cannot clash with page ids', async () => {
    await mount();
    expect(qa('.jp-torchfuser-graph [id]')).toHaveLength(0);
  });

  it('adds the kernel class itself when the DOT lacks it', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    for (const pass of bundle.reports[0].passes) {
      if (pass.graph_after) pass.graph_after.dot = pass.graph_after.dot.replace(/, class="jp-torchfuser-kernel"/g, '');
    }
    const view = new ExplorerView({ interactive: true });
    document.body.appendChild(view.node);
    view.setBundle(bundle);
    await view.whenDrawn();
    expect(qa('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel')).toHaveLength(3);
  });

  it('shows the graphs before and after the selected pass', async () => {
    const view = await mount();
    view.selectPass('fuse_pointwise');
    await view.whenDrawn();
    expect(nodeIds('before')).toEqual(expect.arrayContaining(['tf_gemm_0', 'mul', 'add']));
    expect(nodeIds('after')).toContain('tf_pointwise_2');
    expect(nodeIds('after')).not.toContain('mul');
    view.selectPass('eliminate_dead_code');
    await view.whenDrawn();
    expect(q('.jp-torchfuser-graph[data-side="after"]')!.textContent).toContain('disabled');
  });

  it('reports a layout failure as text in the pane', async () => {
    setLayoutEngine({ renderSvg: async () => { throw new Error('syntax error in line 1 <b>'); } });
    await mount();
    const pane = q('.jp-torchfuser-graph[data-side="before"]')!;
    expect(pane.getAttribute('data-state')).toBe('error');
    expect(pane.textContent).toContain('<b>');
    expect(pane.querySelector('b')).toBeNull();
  });
});

describe('explorer view: interaction', () => {
  it('hovering a node highlights its counterparts on the other side', async () => {
    const view = await mount();
    view.selectPass('fuse_gemm_epilogue');
    await view.whenDrawn();
    const addmm = q('.jp-torchfuser-graph[data-side="before"] g.node[data-node-id="addmm"] polygon')!;
    addmm.dispatchEvent(new Event('pointerover', { bubbles: true }));
    const marked = qa('.jp-torchfuser-graph[data-side="after"] g.jp-torchfuser-counterpart').map(g => g.getAttribute('data-node-id'));
    expect(marked).toEqual(['tf_gemm_0']);
    expect(q('g[data-node-id="addmm"]')!.classList.contains('jp-torchfuser-hover')).toBe(true);

    const kernel = q('.jp-torchfuser-graph[data-side="after"] g.node[data-node-id="tf_gemm_0"] text')!;
    kernel.dispatchEvent(new Event('pointerover', { bubbles: true }));
    const back = qa('.jp-torchfuser-graph[data-side="before"] g.jp-torchfuser-counterpart').map(g => g.getAttribute('data-node-id'));
    expect(back.sort()).toEqual(['addmm', 'gelu', 't']);

    q('.jp-torchfuser-graph[data-side="after"]')!.dispatchEvent(new Event('pointerleave'));
    expect(qa('g.jp-torchfuser-counterpart')).toHaveLength(0);
  });

  it('clicking a fused kernel shows its OpenCL source, cache status and times', async () => {
    await mount();
    (q('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel[data-node-id="tf_gemm_0"] text') as SVGElement)
      .dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const pane = q('.jp-torchfuser-source')!;
    expect(pane.getAttribute('data-kernel')).toBe('tf_gemm_0');
    expect(pane.textContent).toContain('__kernel void tf_gemm_0');
    expect(pane.querySelector('.jp-torchfuser-cache[data-status="miss"]')).not.toBeNull();
    expect(pane.textContent).toContain('810 ms'); // build time
    expect(pane.textContent).toContain('140 µs'); // per launch
    expect(pane.textContent).toContain('x = self.fc1(x)');
    expect(pane.querySelectorAll('.jp-torchfuser-tok-keyword').length).toBeGreaterThan(0);
    expect(q('g[data-node-id="tf_gemm_0"]')!.classList.contains('jp-torchfuser-selected')).toBe(true);
  });

  it('lists kernels with cache badges and selects one from the table', async () => {
    await mount();
    const statuses = qa('.jp-torchfuser-kernels .jp-torchfuser-cache').map(b => b.getAttribute('data-status'));
    expect(statuses).toEqual(['miss', 'disk', 'hit']);
    (q('.jp-torchfuser-kernels tr[data-kernel="tf_pointwise_2"] button') as HTMLButtonElement).click();
    expect(q('.jp-torchfuser-source')!.getAttribute('data-kernel')).toBe('tf_pointwise_2');
  });

  it('clicking a plain node shows its details', async () => {
    await mount();
    (q('.jp-torchfuser-graph[data-side="after"] g.node[data-node-id="cumsum"] text') as SVGElement)
      .dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const pane = q('.jp-torchfuser-source')!;
    expect(pane.getAttribute('data-state')).toBe('node');
    expect(pane.textContent).toContain('no OpenCL kernel for this op');
  });

  it('searches by op and module name in both graphs', async () => {
    const view = await mount();
    view.search('fc2', false);
    expect(q('.jp-torchfuser-graph[data-side="before"]')!.classList.contains('jp-torchfuser-searching')).toBe(true);
    expect(qa('.jp-torchfuser-graph[data-side="before"] g.jp-torchfuser-match').map(g => g.getAttribute('data-node-id')).sort())
      .toEqual(['addmm_1', 'p_fc2_bias', 'p_fc2_weight', 't_1']);
    expect(qa('.jp-torchfuser-graph[data-side="after"] g.jp-torchfuser-match').map(g => g.getAttribute('data-node-id')))
      .toContain('tf_gemm_1');
    expect(q('.jp-torchfuser-match-count')!.textContent).toBe('4 before · 3 after');
    view.search('', false);
    expect(qa('g.jp-torchfuser-match')).toHaveLength(0);
  });

  it('collapses and expands a module from the module list and by clicking its box', async () => {
    const view = await mount();
    const toggle = q('input.jp-torchfuser-module-toggle[data-module="fc2"]') as HTMLInputElement;
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change', { bubbles: true }));
    await view.whenDrawn();
    expect(nodeIds('before')).toContain('module:fc2');
    expect(nodeIds('before')).not.toContain('addmm_1');
    // Hovering the box still finds the fused kernel on the other side.
    q('g[data-node-id="module:fc2"] polygon')!.dispatchEvent(new Event('pointerover', { bubbles: true }));
    expect(qa('.jp-torchfuser-graph[data-side="after"] g.jp-torchfuser-counterpart').map(g => g.getAttribute('data-node-id')))
      .toEqual(expect.arrayContaining(['module:fc2']));
    (q('.jp-torchfuser-graph[data-side="before"] g[data-node-id="module:fc2"] text') as SVGElement)
      .dispatchEvent(new MouseEvent('click', { bubbles: true }));
    await view.whenDrawn();
    expect(nodeIds('before')).toContain('addmm_1');
    const level = q('select.jp-torchfuser-collapse-level') as HTMLSelectElement;
    expect(Array.from(level.options).map(o => o.value)).toEqual(['', '0']);
    level.value = '0';
    level.dispatchEvent(new Event('change'));
    await view.whenDrawn();
    expect(nodeIds('before')).toEqual(expect.arrayContaining(['module:fc1', 'module:fc2', 'module:head']));
    (q('button.jp-torchfuser-expand-all') as HTMLButtonElement).click();
    await view.whenDrawn();
    expect(nodeIds('before')).toContain('addmm_1');
  });

  it('offers a selector when the bundle has several reports (graph breaks)', async () => {
    const view = await mount('graph_breaks_bundle.json');
    const select = q('select.jp-torchfuser-report-select') as HTMLSelectElement;
    expect(select.options).toHaveLength(2);
    select.value = '1';
    select.dispatchEvent(new Event('change'));
    await view.whenDrawn();
    expect(q('.jp-torchfuser-title')!.textContent).toBe('MLP forward (graph 2)');
  });

  it('draws the eager-vs-compiled bar with one segment per kernel', async () => {
    await mount();
    expect(q('.jp-torchfuser-timing')!.textContent).toContain('2.67× faster than eager');
    expect(qa('.jp-torchfuser-timing-kernel').map(s => s.getAttribute('data-kernel'))).toEqual(['tf_gemm_0', 'tf_gemm_1', 'tf_pointwise_2']);
  });

  it('says "slower" with the factor above one when compiled code loses', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    bundle.reports[0].timings.speedup = 0.125;
    const view = new ExplorerView({ interactive: true });
    document.body.appendChild(view.node);
    view.setBundle(bundle);
    expect(q('.jp-torchfuser-timing')!.textContent).toContain('8.00× slower than eager');
  });
});

describe('explorer view: passes and hosts', () => {
  it('toggles and Re-run go to the host in pipeline order', async () => {
    const host = { interactive: true, setEnabledPasses: vi.fn(), rerun: vi.fn() };
    await mount('mlp_bundle.json', host);
    const toggles = qa('input.jp-torchfuser-pass-toggle') as HTMLInputElement[];
    expect(toggles.map(t => [t.getAttribute('data-pass'), t.checked, t.disabled])).toEqual([
      ['fuse_gemm_epilogue', true, false],
      ['fuse_pointwise', true, false],
      ['eliminate_dead_code', false, false]
    ]);
    const dce = q('input.jp-torchfuser-pass-toggle[data-pass="eliminate_dead_code"]') as HTMLInputElement;
    dce.checked = true;
    dce.dispatchEvent(new Event('change', { bubbles: true }));
    const gemm = q('input.jp-torchfuser-pass-toggle[data-pass="fuse_gemm_epilogue"]') as HTMLInputElement;
    gemm.checked = false;
    gemm.dispatchEvent(new Event('change', { bubbles: true }));
    expect(host.setEnabledPasses).toHaveBeenLastCalledWith(['fuse_pointwise', 'eliminate_dead_code']);
    (q('button.jp-torchfuser-rerun') as HTMLButtonElement).click();
    expect(host.rerun).toHaveBeenCalledWith(['fuse_pointwise', 'eliminate_dead_code']);
  });

  it('a static host disables toggles and Re-run and says why', async () => {
    await mount('mlp_bundle.json', { interactive: false });
    expect((qa('input.jp-torchfuser-pass-toggle') as HTMLInputElement[]).every(t => t.disabled)).toBe(true);
    expect((q('button.jp-torchfuser-rerun') as HTMLButtonElement).disabled).toBe(true);
    expect(q('.jp-torchfuser-kernel-note')!.textContent).toContain('running kernel');
  });

  it('shows the status and blocks Re-run while busy', async () => {
    const view = await mount();
    view.setStatus('running: compiling 3 kernels');
    expect(q('.jp-torchfuser-status')!.textContent).toBe('running: compiling 3 kernels');
    expect((q('button.jp-torchfuser-rerun') as HTMLButtonElement).disabled).toBe(true);
    view.setStatus('idle');
    expect((q('button.jp-torchfuser-rerun') as HTMLButtonElement).disabled).toBe(false);
  });

  it('explains a bundle it cannot read instead of throwing', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle({ kind: 'torchfuser.explorer', reports: [{ schema_version: 99 }] });
    await view.whenDrawn();
    expect(q('.jp-torchfuser-error')!.textContent).toContain('schema_version 99');
  });

  it('accepts a bare report as well as a bundle', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(loadFixture('mlp_bundle.json').reports[0]);
    await view.whenDrawn();
    expect(nodeIds('after')).toContain('tf_gemm_0');
  });
});

describe('a report produced by the core (torchfuser explorer.show on an MLP)', () => {
  it('draws, and a click on a kernel node shows its OpenCL source', async () => {
    await mount('core_mlp_bundle.json');
    const kernels = qa('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel');
    expect(kernels.length).toBeGreaterThanOrEqual(2);
    (kernels[0].querySelector('text') as SVGElement).dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const pane = q('.jp-torchfuser-source')!;
    expect(pane.getAttribute('data-state')).toBe('kernel');
    expect(pane.textContent).toContain('__kernel');
    expect(pane.querySelector('.jp-torchfuser-cache[data-status]')).not.toBeNull();
  });
});

describe('many kernels', () => {
  it('names only the slowest kernels in the timing legend', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    const report = bundle.reports[0];
    const template = report.kernels[0];
    report.kernels = Array.from({ length: 30 }, (_, i) => ({ ...template, name: `k${i}`, group: null, seconds: (i + 1) * 1e-5 }));
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(bundle);
    await view.whenDrawn();
    const named = qa('.jp-torchfuser-timing-legend li[data-kernel]').map(li => li.getAttribute('data-kernel'));
    expect(named).toHaveLength(12);
    expect(named[0]).toBe('k29');
    expect(q('.jp-torchfuser-timing-legend')!.textContent).toContain('18 faster kernels');
    expect(qa('.jp-torchfuser-timing-kernel')).toHaveLength(30);
  });
});

describe('fused-group colours', () => {
  it('paints the nodes a kernel covers when their graph has no group colours (the ATen graph)', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    const aten = bundle.reports[0].graphs.aten;
    for (const node of aten.nodes) node.group = null;
    aten.dot = aten.dot.replace(/, fillcolor="#[0-9a-f]+"/g, '');
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(bundle);
    await view.whenDrawn();
    const fill = (side: string, id: string) =>
      q(`.jp-torchfuser-graph[data-side="${side}"] g.node[data-node-id="${id}"] polygon`)!.getAttribute('fill');
    expect(fill('before', 'addmm')).toBe(fill('after', 'tf_gemm_0'));
    expect(fill('before', 'mul')).toBe(fill('after', 'tf_pointwise_2'));
    expect(fill('before', 'cumsum')).toBe('white');
  });
});
