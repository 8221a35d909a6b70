/**
 * The detail pane (.jp-torchfuser-source): for a fused kernel its OpenCL
 * source, cache status, where it ran (its lane, and why), build and launch
 * times and the user source lines it came from; for any other node its op,
 * shape and source line. A kernel's source lines that compute graph nodes are
 * buttons (source_lines.ts): choosing one is reported to the view.
 */
import { appendChildren, clear, el, onActivate } from './dom';
import { formatLocation, formatSeconds, formatShape } from './format';
import type { Fallback, GraphNode, Kernel } from './schema';
import { nodesOfLine, renderSourceLines, SOURCE_LINE_CLASS, type SourceLineChoice } from './source_lines';
import { lineKey } from './user_lines';

const CACHE_LABELS: Record<string, string> = {
  hit: 'cache hit (memory)',
  disk: 'cache hit (disk)',
  miss: 'cache miss (built)'
};

export function cacheBadge(status: string): HTMLElement {
  const known = status === 'hit' || status === 'miss' || status === 'disk';
  return el('span', {
    className: 'jp-torchfuser-cache',
    text: known ? CACHE_LABELS[status] : `cache ${status}`,
    attrs: { 'data-status': known ? status : 'unknown' }
  });
}

/** What each lane means; '' for a lane this view does not know. */
export function laneMeaning(lane: string): string {
  return lane === 'inline' ? 'in the calling thread' : lane === 'threaded' ? "on the device's worker threads" : '';
}

/** Where the kernel ran, with the reason (and its estimated costs) as the tooltip. Null for older reports. */
export function laneBadge(lane: unknown, reason: unknown): HTMLElement | null {
  if (typeof lane !== 'string' || !lane) {
    return null;
  }
  const known = laneMeaning(lane) !== '';
  return el('span', {
    // Drawn like the kernel kind beside it (muted text); the cache badge keeps the emphasis.
    className: 'jp-torchfuser-lane jp-torchfuser-kernel-kind',
    text: known ? lane : `lane ${lane}`,
    attrs: { 'data-lane': known ? lane : 'unknown', title: typeof reason === 'string' && reason ? reason : null }
  });
}

function definitionList(rows: [string, string][]): HTMLElement {
  const list = el('dl', { className: 'jp-torchfuser-facts' });
  for (const [term, value] of rows) {
    if (value) {
      list.appendChild(el('dt', { text: term }));
      list.appendChild(el('dd', { text: value }));
    }
  }
  return list;
}

function sourceLine(item: { module?: string; module_type?: string; file: string | null; line: number | null; code: string | null }): HTMLElement {
  const module = item.module ? (item.module_type ? `${item.module} (${item.module_type})` : item.module) : '(top level)';
  // Keyed like the "Your lines" list, so a chosen OpenCL line can highlight it here too.
  const key = item.file || item.code ? lineKey(item.file, item.line, item.code) : null;
  return el('li', { className: 'jp-torchfuser-user-line', attrs: { 'data-line': key } }, [
    el('span', { className: 'jp-torchfuser-user-module', text: module }),
    ' ',
    el('span', { className: 'jp-torchfuser-user-location', text: formatLocation(item.file, item.line) }),
    item.code ? el('code', { className: 'jp-torchfuser-user-code', text: item.code }) : null
  ]);
}

export class SourcePane {
  readonly node: HTMLElement;
  private kernel: Kernel | null = null;

  constructor(onSourceLine: (choice: SourceLineChoice) => void = () => undefined) {
    this.node = el('div', { className: 'jp-torchfuser-source', attrs: { 'data-state': 'empty' } });
    onActivate(this.node, `.${SOURCE_LINE_CLASS}[data-nodes]`, line => {
      if (this.kernel) {
        this.node.querySelectorAll(`.${SOURCE_LINE_CLASS}[data-selected]`).forEach(other => other.removeAttribute('data-selected'));
        line.setAttribute('data-selected', '');
        onSourceLine({ kernel: this.kernel, ids: nodesOfLine(line) });
      }
    });
    this.showHint();
  }

  /** Highlights the kernel's "From your code" lines whose keys are in `keys` (user_lines.ts lineKey). */
  highlightUserLines(keys: Set<string>): void {
    this.node.querySelectorAll('.jp-torchfuser-user-line').forEach(row => {
      row.classList.toggle('jp-torchfuser-highlight', keys.has(row.getAttribute('data-line') ?? ''));
    });
  }

  showHint(): void {
    this.kernel = null;
    clear(this.node);
    this.node.setAttribute('data-state', 'empty');
    this.node.appendChild(
      el('div', {
        className: 'jp-torchfuser-hint',
        text: 'Click a fused kernel (thick outline) to see its OpenCL source; click any node for its details.'
      })
    );
  }

  showKernel(kernel: Kernel, callsPerRun: number | null): void {
    this.kernel = kernel;
    clear(this.node);
    this.node.setAttribute('data-state', 'kernel');
    this.node.setAttribute('data-kernel', kernel.name);
    const perCall = callsPerRun ? kernel.seconds / callsPerRun : null;
    const header = el('div', { className: 'jp-torchfuser-source-header' }, [
      el('span', { className: 'jp-torchfuser-kernel-name', text: kernel.name }),
      el('span', { className: 'jp-torchfuser-kernel-kind', text: kernel.kind }),
      cacheBadge(kernel.cache),
      laneBadge(kernel.lane, kernel.lane_reason)
    ]);
    const lane = typeof kernel.lane === 'string' ? kernel.lane : '';
    const facts = definitionList([
      ['build time', formatSeconds(kernel.build_seconds)],
      ['per launch', formatSeconds(kernel.mean_seconds)],
      ['launches', String(kernel.launches ?? 0)],
      ['device time', formatSeconds(kernel.seconds)],
      ['per graph call', perCall === null ? '' : formatSeconds(perCall)],
      ['runs', lane && laneMeaning(lane) ? `${lane}: ${laneMeaning(lane)}` : lane],
      ['why', typeof kernel.lane_reason === 'string' ? kernel.lane_reason : ''],
      ['fused group', kernel.group === null || kernel.group === undefined ? '' : String(kernel.group)],
      ['covers', (kernel.nodes ?? []).join(', ')],
      ['cache key', kernel.cache_key ? kernel.cache_key.slice(0, 16) + '…' : '']
    ]);
    const sources = el('ul', { className: 'jp-torchfuser-user-lines' }, (kernel.sources ?? []).map(sourceLine));
    const code = el('pre', { className: 'jp-torchfuser-code' }, [
      el('code', { className: 'jp-torchfuser-opencl' }, renderSourceLines(kernel))
    ]);
    appendChildren(this.node, [
      header,
      facts,
      el('div', { className: 'jp-torchfuser-subtitle', text: 'From your code' }),
      (kernel.sources ?? []).length ? sources : el('div', { className: 'jp-torchfuser-hint', text: 'no source lines recorded' }),
      el('div', { className: 'jp-torchfuser-subtitle', text: 'OpenCL C' }),
      code,
      kernel.spec
        ? el('details', { className: 'jp-torchfuser-spec' }, [
            el('summary', { text: 'kernel spec' }),
            el('pre', { text: kernel.spec })
          ])
        : null
    ]);
  }

  showNode(node: GraphNode, fallback: Fallback | undefined): void {
    this.kernel = null;
    clear(this.node);
    this.node.setAttribute('data-state', 'node');
    this.node.removeAttribute('data-kernel');
    this.node.append(
      el('div', { className: 'jp-torchfuser-source-header' }, [
        el('span', { className: 'jp-torchfuser-kernel-name', text: node.label || node.id }),
        el('span', { className: 'jp-torchfuser-kernel-kind', text: node.op })
      ]),
      definitionList([
        ['node', node.id],
        ['target', node.target],
        ['value', formatShape(node.shape, node.dtype)],
        ['fused group', node.group === null || node.group === undefined ? '' : String(node.group)],
        ['runs in PyTorch', fallback ? fallback.reason : '']
      ]),
      el('ul', { className: 'jp-torchfuser-user-lines' }, [sourceLine(node)])
    );
  }
}
