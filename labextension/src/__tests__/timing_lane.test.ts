/**
 * The host-overhead segment of the timing bar and each kernel's lane (where it
 * ran, and why), for reports with the newer fields and for older ones without.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ExplorerView } from '../view/explorer_view';
import { setLayoutEngine } from '../view/layout_engine';
import { decodeBundle } from '../view/decode';
import { SourcePane } from '../view/source_pane';
import { hostOverhead, kernelSegments, renderTimingBar } from '../view/timing_bar';
import { loadFixture, stubGraphviz } from './fixtures';

const HOSTILE = '<img src=x onerror="window.__x=1">';
const INLINE_REASON = 'in the calling thread: expected 3.1 us in the calling thread, 41.0 us threaded';

/** mlp_bundle.json: 4 calls, kernels 0.26 ms per call in all, compiled 0.3 ms, eager 0.8 ms. */
function bundle(withNewFields: boolean): any {
  const value = loadFixture('mlp_bundle.json');
  if (withNewFields) {
    const report = value.reports[0];
    report.timings.kernel_seconds = 0.00026;
    report.timings.host_overhead_seconds = 0.00006; // deliberately not compiled - kernels: the report's own figure wins
    report.timings.compiled_seconds = 0.00032;
    report.kernels[0].lane = 'threaded';
    report.kernels[0].lane_reason = 'on the worker threads: expected 512 us in the calling thread, 160 us threaded';
    report.kernels[1].lane = 'inline';
    report.kernels[1].lane_reason = INLINE_REASON;
    report.kernels[2].lane = 'inline';
    report.kernels[2].lane_reason = HOSTILE;
  }
  return value;
}

function timingBar(value: any): HTMLElement {
  const report = decodeBundle(value).reports[0];
  const node = renderTimingBar(report, () => '#123456', () => undefined);
  document.body.appendChild(node);
  return node;
}

const widthOf = (element: Element) => parseFloat((element as HTMLElement).style.width);

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
  delete (window as any).__x;
});

describe('timing bar: host overhead segment', () => {
  it("takes the report's host_overhead_seconds, after the kernel segments", () => {
    const node = timingBar(bundle(true));
    const compiled = node.querySelector('.jp-torchfuser-timing-compiled')!;
    const children = Array.from(compiled.children);
    expect(children.map(c => c.className)).toEqual([
      'jp-torchfuser-timing-kernel',
      'jp-torchfuser-timing-kernel',
      'jp-torchfuser-timing-kernel',
      'jp-torchfuser-overhead'
    ]);
    const overhead = compiled.querySelector('.jp-torchfuser-overhead')!;
    // 0.06 of max(0.32 compiled, 0.26 + 0.06) ms
    expect(widthOf(overhead)).toBeCloseTo((100 * 0.06) / 0.32, 3);
    expect(overhead.getAttribute('title')).toBe('host overhead: 60.0 µs per call (launching kernels, Python, ops in PyTorch)');
    expect(overhead.hasAttribute('data-kernel')).toBe(false);
    const segmentTotal = children.reduce((sum, c) => sum + widthOf(c), 0);
    expect(segmentTotal).toBeLessThanOrEqual(100.0001);
    expect(node.querySelector('.jp-torchfuser-timing-split')!.textContent).toBe(
      'compiled 320 µs = kernels 260 µs + host overhead 60.0 µs (launching kernels, Python, ops in PyTorch)'
    );
    expect(node.querySelector('.jp-torchfuser-overhead-key')!.textContent).toBe('host overhead 60.0 µs');
  });

  it('derives it for older reports: compiled - kernel total', () => {
    const value = bundle(false);
    expect('host_overhead_seconds' in value.reports[0].timings).toBe(false);
    const report = decodeBundle(value).reports[0];
    const kernelTotal = kernelSegments(report).reduce((sum, s) => sum + s.seconds, 0);
    expect(kernelTotal).toBeCloseTo(0.00026, 9);
    expect(hostOverhead(report, kernelTotal)).toBeCloseTo(0.00004, 9);
    const overhead = timingBar(value).querySelector('.jp-torchfuser-timing-compiled > .jp-torchfuser-overhead')!;
    expect(widthOf(overhead)).toBeCloseTo((100 * 0.04) / 0.3, 3);
    expect(overhead.getAttribute('title')).toContain('40.0 µs');
  });

  it('is clamped at zero when kernels outlast the measured compiled time', () => {
    const value = bundle(false);
    value.reports[0].timings.compiled_seconds = 0.0001;
    const node = timingBar(value);
    expect(widthOf(node.querySelector('.jp-torchfuser-overhead')!)).toBe(0);
    const kernels = Array.from(node.querySelectorAll('.jp-torchfuser-timing-kernel'));
    expect(kernels.reduce((sum, c) => sum + widthOf(c), 0)).toBeCloseTo(100, 3);
  });

  it('is left out when the compiled time was not measured', () => {
    const value = bundle(false);
    value.reports[0].timings.compiled_seconds = null;
    value.reports[0].timings.speedup = null;
    const node = timingBar(value);
    expect(node.querySelector('.jp-torchfuser-overhead')).toBeNull();
    expect(node.querySelector('.jp-torchfuser-timing-split')).toBeNull();
    expect(node.querySelectorAll('.jp-torchfuser-timing-kernel')).toHaveLength(3);
  });

  it('still renders a report whose timings are missing', () => {
    const value = bundle(false);
    delete value.reports[0].timings;
    const node = timingBar(value);
    expect(node.querySelector('.jp-torchfuser-overhead')).toBeNull();
  });

  it('appears in the explorer view', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(bundle(true));
    await view.whenDrawn();
    const overhead = document.querySelector('.jp-torchfuser-timing .jp-torchfuser-timing-compiled > .jp-torchfuser-overhead');
    expect(overhead).not.toBeNull();
    expect(widthOf(overhead!)).toBeGreaterThan(0);
  });
});

describe('kernel details: lane', () => {
  it('shows where the selected kernel ran and why', async () => {
    const view = new ExplorerView({ interactive: true });
    document.body.appendChild(view.node);
    view.setBundle(bundle(true));
    await view.whenDrawn();
    (document.querySelector('.jp-torchfuser-kernels tr[data-kernel="tf_gemm_1"] button') as HTMLButtonElement).click();
    const pane = document.querySelector('.jp-torchfuser-source')!;
    expect(pane.getAttribute('data-kernel')).toBe('tf_gemm_1');
    const badge = pane.querySelector('.jp-torchfuser-source-header .jp-torchfuser-lane')!;
    expect(badge.getAttribute('data-lane')).toBe('inline');
    expect(badge.textContent).toBe('inline');
    expect(badge.getAttribute('title')).toBe(INLINE_REASON);
    const facts = Array.from(pane.querySelectorAll('.jp-torchfuser-facts dt')).map(dt => [dt.textContent, dt.nextElementSibling!.textContent]);
    expect(facts).toContainEqual(['runs', 'inline: in the calling thread']);
    expect(facts).toContainEqual(['why', INLINE_REASON]);
  });

  it('lists each lane in the kernel table', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(bundle(true));
    await view.whenDrawn();
    const lanes = Array.from(document.querySelectorAll('.jp-torchfuser-kernels tbody tr')).map(
      row => row.querySelector('.jp-torchfuser-lane')?.getAttribute('data-lane')
    );
    expect(lanes).toEqual(['threaded', 'inline', 'inline']);
    expect(Array.from(document.querySelectorAll('.jp-torchfuser-kernels th')).map(th => th.textContent)).toContain('lane');
  });

  it('renders a hostile lane and reason as text only', () => {
    const pane = new SourcePane();
    document.body.appendChild(pane.node);
    const kernel = decodeBundle(bundle(true)).reports[0].kernels[2];
    pane.showKernel({ ...kernel, lane: HOSTILE }, 4);
    expect(pane.node.querySelector('img')).toBeNull();
    expect((window as any).__x).toBeUndefined();
    const badge = pane.node.querySelector('.jp-torchfuser-lane')!;
    expect(badge.getAttribute('data-lane')).toBe('unknown');
    expect(badge.textContent).toBe(`lane ${HOSTILE}`);
    expect(badge.getAttribute('title')).toBe(HOSTILE);
    expect(pane.node.textContent).toContain(HOSTILE);
  });

  it('shows no lane for older reports', async () => {
    const view = new ExplorerView({ interactive: true });
    document.body.appendChild(view.node);
    view.setBundle(bundle(false));
    await view.whenDrawn();
    (document.querySelector('.jp-torchfuser-kernels tr[data-kernel="tf_gemm_0"] button') as HTMLButtonElement).click();
    const pane = document.querySelector('.jp-torchfuser-source')!;
    expect(pane.getAttribute('data-kernel')).toBe('tf_gemm_0');
    expect(pane.querySelector('.jp-torchfuser-lane')).toBeNull();
    expect(Array.from(pane.querySelectorAll('.jp-torchfuser-facts dt')).map(dt => dt.textContent)).not.toContain('runs');
    expect(document.querySelector('.jp-torchfuser-kernels tbody tr')!.textContent).toContain('–');
  });
});
