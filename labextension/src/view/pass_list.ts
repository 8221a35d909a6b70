/**
 * The pass list: one row per pipeline pass with its checkbox, node counts,
 * pass-specific counts and time; a first row for the whole pipeline; the
 * Re-run button and the kernel status line underneath.
 */
import { clear, el } from './dom';
import { formatSeconds } from './format';
import { changedNothing, passChange } from './pass_change';
import type { Graph, PassRecord, Report } from './schema';

export const WHOLE_PIPELINE = '__pipeline__';

export interface PassListHandlers {
  onSelect(passName: string): void;
  onToggle(passName: string, enabled: boolean): void;
  onRerun(): void;
}

function nodeCounts(record: PassRecord | undefined): string {
  if (!record) {
    return '';
  }
  const before = record.stats.nodes_before ?? record.graph_before?.nodes.length;
  const after = record.stats.nodes_after ?? record.graph_after?.nodes.length;
  if (before === undefined || after === undefined) {
    return '';
  }
  return `${before} → ${after} nodes`;
}

function otherStats(record: PassRecord | undefined): string {
  if (!record) {
    return '';
  }
  return Object.entries(record.stats)
    .filter(([key]) => key !== 'nodes_before' && key !== 'nodes_after')
    .map(([key, value]) => `${key}: ${String(value)}`)
    .join(', ');
}

/** What the pass left unfused and why: a count that opens into node: reason lines (null when nothing). */
function unfusedDetails(record: PassRecord | undefined, open: boolean): HTMLElement | null {
  const unfused = record?.unfused ?? [];
  if (!unfused.length) {
    return null;
  }
  const details = el('details', { className: 'jp-torchfuser-unfused', attrs: { 'data-pass': record!.name, open } }, [
    el('summary', { text: `${unfused.length} left unfused` }),
    el(
      'ul',
      {},
      unfused.map(([node, why]) =>
        el('li', { className: 'jp-torchfuser-unfused-node', attrs: { 'data-node': node } }, [
          el('code', { text: node }),
          `: ${why}`
        ])
      )
    )
  ]);
  return details;
}

/** Why a pass failed: v2's `error`, or v1's stats.error. */
export function passError(record: PassRecord | undefined): string | null {
  const error: unknown = record?.error ?? (record?.stats as Record<string, unknown> | undefined)?.error;
  return typeof error === 'string' && error ? error : null;
}

function passState(record: PassRecord | undefined): string {
  if (!record) {
    return 'not run';
  }
  if (passError(record)) {
    return 'failed';
  }
  if (!record.enabled) {
    return 'disabled';
  }
  return record.modified ? 'changed' : 'no change';
}

export interface GraphsToCompare {
  before: Graph | null;
  after: Graph | null;
  caption: [string, string];
  /** Shown in a pane with no graph. */
  message: string;
}

/** The graphs to compare for the selected pass (or the whole pipeline), with a message when one is missing. */
export function graphsToCompare(report: Report | null, selectedPass: string): GraphsToCompare {
  if (!report) {
    return { before: null, after: null, caption: ['', ''], message: 'No report.' };
  }
  if (selectedPass === WHOLE_PIPELINE) {
    const ran = report.passes.filter(p => p.enabled && p.graph_after);
    const before = report.graphs.aten ?? report.passes.find(p => p.graph_before)?.graph_before ?? null;
    const after = ran.length ? ran[ran.length - 1].graph_after : before;
    return { before, after, caption: ['ATen graph (before all passes)', 'final graph (after all passes)'], message: 'This report has no graphs.' };
  }
  const record = report.passes.find(p => p.name === selectedPass);
  const error = passError(record);
  const message = error
    ? `${selectedPass} failed, so the graph was compiled without it: ${error}`
    : record && !record.enabled
      ? `${selectedPass} was disabled in this run.`
      : 'No graph recorded.';
  return {
    before: record?.graph_before ?? null,
    after: record?.graph_after ?? null,
    caption: [`before ${selectedPass}`, `after ${selectedPass}`],
    message
  };
}

export class PassList {
  readonly node: HTMLElement;
  private readonly list: HTMLElement;
  private readonly rerunButton: HTMLButtonElement;
  private readonly status: HTMLElement;
  private readonly hideUnchanged: HTMLInputElement;
  /** Passes whose unfused list the user opened (kept across re-renders). */
  private readonly openUnfused = new Set<string>();
  private rendered: Parameters<PassList['render']> | null = null;

  constructor(
    private readonly interactive: boolean,
    private readonly handlers: PassListHandlers
  ) {
    this.list = el('ol', { className: 'jp-torchfuser-passes' });
    this.rerunButton = el('button', {
      className: 'jp-torchfuser-rerun jp-mod-styled',
      text: 'Re-run',
      attrs: {
        type: 'button',
        disabled: !interactive,
        title: interactive ? 'Compile and run again with the checked passes' : 'Re-run needs a running kernel'
      }
    });
    this.rerunButton.addEventListener('click', () => this.handlers.onRerun());
    this.status = el('div', { className: 'jp-torchfuser-status', attrs: { role: 'status' } });
    this.hideUnchanged = el('input', { className: 'jp-torchfuser-hide-unchanged', attrs: { type: 'checkbox' } });
    this.hideUnchanged.addEventListener('change', () => this.rendered && this.render(...this.rendered));
    this.node = el('div', { className: 'jp-torchfuser-pass-panel' }, [
      el('div', { className: 'jp-torchfuser-subtitle', text: 'Passes' }),
      el('label', { className: 'jp-torchfuser-hide-unchanged-label' }, [this.hideUnchanged, ' hide passes that changed nothing']),
      this.list,
      el('div', { className: 'jp-torchfuser-rerun-row' }, [this.rerunButton, this.status]),
      interactive
        ? null
        : el('div', {
            className: 'jp-torchfuser-kernel-note',
            text: 'Static report: switching passes and Re-run need a running kernel (run the cell again).'
          })
    ]);
    this.list.addEventListener('change', this.onChange);
    this.list.addEventListener('click', this.onClick);
    this.list.addEventListener(
      'toggle',
      event => {
        const details = event.target as HTMLDetailsElement;
        const name = details.getAttribute?.('data-pass');
        if (name) {
          if (details.open) {
            this.openUnfused.add(name);
          } else {
            this.openUnfused.delete(name);
          }
        }
      },
      true // toggle does not bubble
    );
  }

  render(report: Report | null, pipeline: string[], enabled: Set<string>, selected: string): void {
    this.rendered = [report, pipeline, enabled, selected];
    clear(this.list);
    const records = new Map((report?.passes ?? []).map(p => [p.name, p]));
    const names = [...pipeline, ...[...records.keys()].filter(name => !pipeline.includes(name))];
    this.list.appendChild(
      el('li', { className: 'jp-torchfuser-pass', attrs: { 'data-pass-row': WHOLE_PIPELINE, 'data-selected': selected === WHOLE_PIPELINE } }, [
        el('span', { className: 'jp-torchfuser-pass-spacer' }),
        el('button', { className: 'jp-torchfuser-pass-name', text: 'all passes', attrs: { type: 'button', 'data-select': WHOLE_PIPELINE } }),
        el('span', { className: 'jp-torchfuser-pass-counts', text: 'ATen graph → final graph' })
      ])
    );
    for (const name of names) {
      const record = records.get(name);
      const checkbox = el('input', {
        className: 'jp-torchfuser-pass-toggle',
        attrs: {
          type: 'checkbox',
          'data-pass': name,
          disabled: !this.interactive,
          title: this.interactive ? `Run ${name} on the next Re-run` : 'Switching passes needs a running kernel',
          'aria-label': `enable ${name}`
        }
      });
      checkbox.checked = enabled.has(name);
      const seconds = record ? formatSeconds(record.seconds) : '';
      // A failed pass changed nothing too, but stays in view: its failure is news.
      const unchanged = changedNothing(passChange(record)) && !passError(record);
      this.list.appendChild(
        el('li', {
          className: 'jp-torchfuser-pass',
          attrs: {
            'data-pass-row': name,
            'data-pass': name,
            'data-selected': selected === name,
            'data-state': passState(record),
            'data-unchanged': unchanged,
            hidden: unchanged && this.hideUnchanged.checked && selected !== name
          }
        }, [
          checkbox,
          el('button', { className: 'jp-torchfuser-pass-name', text: name, attrs: { type: 'button', 'data-select': name } }),
          el('span', { className: 'jp-torchfuser-pass-counts', text: nodeCounts(record) }),
          el('span', { className: 'jp-torchfuser-pass-stats', text: otherStats(record) }),
          el('span', { className: 'jp-torchfuser-pass-state', text: [passState(record), seconds].filter(Boolean).join(' · ') }),
          unfusedDetails(record, this.openUnfused.has(name))
        ])
      );
    }
  }

  setStatus(text: string, busy: boolean): void {
    this.status.textContent = text;
    this.status.setAttribute('data-busy', busy ? 'true' : 'false');
    if (this.interactive) {
      this.rerunButton.disabled = busy;
    }
  }

  private readonly onChange = (event: Event) => {
    const input = event.target as HTMLInputElement;
    if (input.classList?.contains('jp-torchfuser-pass-toggle')) {
      this.handlers.onToggle(input.getAttribute('data-pass') ?? '', input.checked);
    }
  };

  /** A click anywhere on a row selects its pass, except on its checkbox or its unfused list. */
  private readonly onClick = (event: Event) => {
    const target = event.target as Element;
    if (target.closest?.('input, details')) {
      return;
    }
    const row = target.closest?.('[data-pass-row]');
    const name = row?.getAttribute('data-pass-row');
    if (name) {
      this.handlers.onSelect(name);
    }
  };
}
