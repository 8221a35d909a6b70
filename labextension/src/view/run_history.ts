/**
 * Run history (.jp-torchfuser-runs): each explorer run (passes on, kernels
 * with time per call, total and speedup); choosing two compares them
 * (.jp-torchfuser-run-compare). compareRuns mirrors explorer/runs.py's
 * compare_runs exactly, so the page and `view.compare()` agree.
 */
import { clear, el } from './dom';
import { formatSeconds } from './format';
import type { Run, RunKernel } from './schema';

export interface SharedKernel {
  name: string;
  kind: string;
  before: number;
  after: number;
}

export interface RunComparison {
  runs: [number, number];
  passes_on: string[];
  passes_off: string[];
  added: RunKernel[];
  removed: RunKernel[];
  shared: SharedKernel[];
  /** null where either run was not timed. */
  speedup_delta: number | null;
}

/** What changed from run `before` to run `after` (explorer/runs.py compare_runs). */
export function compareRuns(before: Run, after: Run): RunComparison {
  // Later entries win for a repeated name, as a Python dict comprehension does.
  const old = new Map(before.kernels.map(k => [k.name, k]));
  const fresh = new Map(after.kernels.map(k => [k.name, k]));
  return {
    runs: [before.number, after.number],
    passes_on: after.enabled_passes.filter(p => !before.enabled_passes.includes(p)),
    passes_off: before.enabled_passes.filter(p => !after.enabled_passes.includes(p)),
    added: [...fresh.values()].filter(k => !old.has(k.name)),
    removed: [...old.values()].filter(k => !fresh.has(k.name)),
    shared: [...fresh.values()]
      .filter(k => old.has(k.name))
      .map(k => ({ name: k.name, kind: k.kind, before: old.get(k.name)!.seconds_per_call, after: k.seconds_per_call })),
    speedup_delta: before.speedup !== null && after.speedup !== null ? after.speedup - before.speedup : null
  };
}

function formatSpeedup(speedup: number | null): string {
  return speedup === null ? 'not timed' : `${speedup.toFixed(2)}×`;
}

function formatDelta(delta: number | null): string {
  if (delta === null) {
    return 'not timed in both';
  }
  return `${delta >= 0 ? '+' : '−'}${Math.abs(delta).toFixed(2)}×`;
}

function kernelRow(name: string, kind: string, change: string, before: number | null, after: number | null): HTMLElement {
  return el('tr', { attrs: { 'data-kernel': name, 'data-change': change } }, [
    el('td', { text: name }),
    el('td', { text: kind }),
    el('td', { text: change }),
    el('td', { text: before === null ? '–' : formatSeconds(before) }),
    el('td', { text: after === null ? '–' : formatSeconds(after) })
  ]);
}

export function renderComparison(comparison: RunComparison): HTMLElement {
  const [a, b] = comparison.runs;
  const passes = [
    comparison.passes_on.length ? `on: ${comparison.passes_on.join(', ')}` : '',
    comparison.passes_off.length ? `off: ${comparison.passes_off.join(', ')}` : ''
  ].filter(Boolean);
  const rows = [
    ...comparison.added.map(k => kernelRow(k.name, k.kind, 'added', null, k.seconds_per_call)),
    ...comparison.removed.map(k => kernelRow(k.name, k.kind, 'removed', k.seconds_per_call, null)),
    ...comparison.shared.map(k => kernelRow(k.name, k.kind, 'shared', k.before, k.after))
  ];
  return el('div', { className: 'jp-torchfuser-run-compare', attrs: { 'data-runs': `${a},${b}` } }, [
    el('div', { className: 'jp-torchfuser-subtitle', text: `Run ${a} → run ${b}` }),
    el('div', { className: 'jp-torchfuser-run-passes', text: `passes ${passes.length ? passes.join('; ') : 'unchanged'}` }),
    el('div', {
      className: 'jp-torchfuser-speedup-delta',
      text: `speedup ${formatDelta(comparison.speedup_delta)} · kernels ${comparison.added.length} added, ${comparison.removed.length} removed, ${comparison.shared.length} in both`
    }),
    el('table', { className: 'jp-torchfuser-run-kernels' }, [
      el('thead', {}, [
        el('tr', {}, ['kernel', 'kind', '', `run ${a} / call`, `run ${b} / call`].map(h => el('th', { text: h })))
      ]),
      el('tbody', {}, rows)
    ])
  ]);
}

function runEntry(run: Run, pipeline: string[]): HTMLElement {
  const off = pipeline.filter(p => !run.enabled_passes.includes(p));
  const kernelSeconds = run.kernels.reduce((sum, k) => sum + k.seconds_per_call, 0);
  const pick = el('input', {
    className: 'jp-torchfuser-run-pick',
    attrs: { type: 'checkbox', 'data-run': run.number, 'aria-label': `compare run ${run.number}` }
  });
  return el('li', { className: 'jp-torchfuser-run', attrs: { 'data-run': run.number } }, [
    el('label', { className: 'jp-torchfuser-run-title' }, [pick, ` Run ${run.number}${run.reused ? ' (reused)' : ''}`]),
    el('div', {
      className: 'jp-torchfuser-run-passes',
      text: off.length ? `passes off: ${off.join(', ')}` : `all ${run.enabled_passes.length} passes on`
    }),
    el('div', {
      className: 'jp-torchfuser-run-total',
      text:
        `compiled ${formatSeconds(run.compiled_seconds)} vs eager ${formatSeconds(run.eager_seconds)} · ` +
        `speedup ${formatSpeedup(run.speedup)} · kernels ${formatSeconds(kernelSeconds)} / call`
    }),
    el(
      'ul',
      { className: 'jp-torchfuser-run-kernel-list' },
      run.kernels.map(k =>
        el('li', { attrs: { 'data-kernel': k.name }, text: `${k.name} (${k.kind}, ×${k.uses}): ${formatSeconds(k.seconds_per_call)} / call` })
      )
    )
  ]);
}

/** The run list; keeps the two runs last chosen and shows their comparison. */
export class RunHistory {
  readonly node = el('div', { className: 'jp-torchfuser-runs' });
  private runs: Run[] = [];
  private pipeline: string[] = [];
  private chosen: number[] = [];
  private readonly compareSlot = el('div', { className: 'jp-torchfuser-run-compare-slot' });

  constructor() {
    this.node.addEventListener('change', event => {
      const input = event.target as HTMLInputElement;
      if (input.classList?.contains('jp-torchfuser-run-pick')) {
        this.choose(Number(input.getAttribute('data-run')), input.checked);
      }
    });
  }

  /** Shows `runs` (hidden when there are none); choices of runs still listed are kept. */
  render(runs: Run[], pipeline: string[]): void {
    this.runs = runs;
    this.pipeline = pipeline;
    this.chosen = this.chosen.filter(n => runs.some(r => r.number === n));
    this.draw();
  }

  choose(number: number, chosen: boolean): void {
    this.chosen = this.chosen.filter(n => n !== number);
    if (chosen) {
      this.chosen = [...this.chosen, number].slice(-2);
    }
    this.showChoice();
  }

  private draw(): void {
    clear(this.node);
    this.node.hidden = this.runs.length === 0;
    if (!this.runs.length) {
      return;
    }
    this.node.append(
      el('div', { className: 'jp-torchfuser-subtitle', text: 'Runs' }),
      el('div', { className: 'jp-torchfuser-hint', text: this.runs.length > 1 ? 'Tick two runs to compare them.' : '' }),
      el('ol', { className: 'jp-torchfuser-run-list' }, this.runs.map(r => runEntry(r, this.pipeline))),
      this.compareSlot
    );
    this.showChoice();
  }

  /** Ticks and marks the chosen runs (a third tick drops the oldest choice) and compares two. */
  private showChoice(): void {
    for (const entry of Array.from(this.node.querySelectorAll('.jp-torchfuser-run'))) {
      const chosen = this.chosen.includes(Number(entry.getAttribute('data-run')));
      entry.toggleAttribute('data-chosen', chosen);
      (entry.querySelector('input.jp-torchfuser-run-pick') as HTMLInputElement).checked = chosen;
    }
    clear(this.compareSlot);
    const picked = this.runs.filter(r => this.chosen.includes(r.number));
    if (picked.length === 2) {
      // The older run first, whichever was ticked first.
      this.compareSlot.append(renderComparison(compareRuns(picked[0], picked[1])));
    }
  }
}
