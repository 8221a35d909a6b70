/**
 * Run history: compareRuns mirrors explorer/runs.py compare_runs on a small
 * hand-made pair; the view lists each run and compares the two ticked.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeBundle } from '../view/decode';
import { ExplorerView } from '../view/explorer_view';
import { setLayoutEngine } from '../view/layout_engine';
import { compareRuns } from '../view/run_history';
import type { Run } from '../view/schema';
import { loadFixture, stubGraphviz } from './fixtures';

const FIRST: Run = {
  number: 1,
  enabled_passes: ['fuse_gemm_epilogue', 'fuse_pointwise', 'eliminate_dead_code'],
  reused: false,
  graphs: 1,
  kernels: [
    { name: 'tf_gemm_a', kind: 'gemm', uses: 2, seconds_per_call: 4e-6 },
    { name: 'tf_pointwise_b', kind: 'pointwise', uses: 1, seconds_per_call: 1e-6 }
  ],
  eager_seconds: 1e-4,
  compiled_seconds: 5e-5,
  speedup: 2.0
};

const SECOND: Run = {
  number: 2,
  enabled_passes: ['fuse_pointwise', 'eliminate_dead_code', 'fuse_reductions'],
  reused: false,
  graphs: 1,
  kernels: [
    { name: 'tf_pointwise_b', kind: 'pointwise', uses: 1, seconds_per_call: 2e-6 },
    { name: 'tf_reduce_c', kind: 'reduction', uses: 1, seconds_per_call: 3e-6 }
  ],
  eager_seconds: 1e-4,
  compiled_seconds: 8e-5,
  speedup: 1.25
};

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('compareRuns (explorer/runs.py compare_runs)', () => {
  it('gives passes switched, kernels added, removed and shared, and the speedup change', () => {
    // What compare_runs(FIRST, SECOND) returns in Python.
    expect(compareRuns(FIRST, SECOND)).toEqual({
      runs: [1, 2],
      passes_on: ['fuse_reductions'],
      passes_off: ['fuse_gemm_epilogue'],
      added: [{ name: 'tf_reduce_c', kind: 'reduction', uses: 1, seconds_per_call: 3e-6 }],
      removed: [{ name: 'tf_gemm_a', kind: 'gemm', uses: 2, seconds_per_call: 4e-6 }],
      shared: [{ name: 'tf_pointwise_b', kind: 'pointwise', before: 1e-6, after: 2e-6 }],
      speedup_delta: -0.75
    });
  });

  it('has no speedup change when either run was not timed', () => {
    expect(compareRuns(FIRST, { ...SECOND, speedup: null }).speedup_delta).toBeNull();
    expect(compareRuns({ ...FIRST, speedup: null }, SECOND).speedup_delta).toBeNull();
    expect(compareRuns(FIRST, FIRST)).toMatchObject({ passes_on: [], passes_off: [], added: [], removed: [], speedup_delta: 0 });
  });

  it('keeps the bundle runs when decoding', () => {
    const bundle = decodeBundle(loadFixture('history_bundle.json'));
    expect(bundle.runs.map(r => r.number)).toEqual([1, 2]);
    expect(bundle.runs[1].enabled_passes).not.toContain('fuse_pointwise');
    expect(decodeBundle(loadFixture('mlp_bundle.json')).runs).toEqual([]);
  });
});

describe('run history in the view', () => {
  it('lists each run and compares the two ticked', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle({ ...loadFixture('mlp_bundle.json'), runs: [FIRST, SECOND] });
    await view.whenDrawn();
    const runs = Array.from(document.querySelectorAll('.jp-torchfuser-run'));
    expect(runs.map(r => r.getAttribute('data-run'))).toEqual(['1', '2']);
    expect(runs[0].textContent).toContain('tf_gemm_a (gemm, ×2): 4.00 µs / call');
    expect(runs[1].textContent).toContain('speedup 1.25×');
    expect(document.querySelector('.jp-torchfuser-run-compare')).toBeNull();
    for (const pick of Array.from(document.querySelectorAll<HTMLInputElement>('input.jp-torchfuser-run-pick'))) {
      pick.checked = true;
      pick.dispatchEvent(new Event('change', { bubbles: true }));
    }
    const compare = document.querySelector('.jp-torchfuser-run-compare')!;
    expect(compare.textContent).toContain('speedup −0.75×');
    const rows = Array.from(compare.querySelectorAll('tbody tr')).map(r => [r.getAttribute('data-kernel'), r.getAttribute('data-change')]);
    expect(rows).toEqual([
      ['tf_reduce_c', 'added'],
      ['tf_gemm_a', 'removed'],
      ['tf_pointwise_b', 'shared']
    ]);
    expect(compare.querySelector('tr[data-kernel="tf_pointwise_b"]')!.textContent).toContain('1.00 µs2.00 µs');
  });

  it('shows no run list outside the explorer', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(loadFixture('mlp_bundle.json'));
    await view.whenDrawn();
    expect((document.querySelector('.jp-torchfuser-runs') as HTMLElement).hidden).toBe(true);
    expect(document.querySelector('.jp-torchfuser-run')).toBeNull();
  });
});
