/**
 * User lines → kernels (.jp-torchfuser-user-lines): the lines of the user's
 * code that kernels came from (the kernels' provenance `sources`), each with
 * the kernels it became. The view highlights a chosen line's kernel nodes in
 * the graphs, and a chosen kernel's lines here.
 */
import { clear, el, onActivate } from './dom';
import { formatLocation } from './format';
import type { Kernel, Report } from './schema';

export interface UserLine {
  key: string;
  file: string | null;
  line: number | null;
  code: string | null;
  module: string;
  kernels: string[];
}

export function lineKey(file: string | null, line: number | null, code: string | null): string {
  // Without a file, the code text stands for the line (two such lines with equal code are one).
  return file ? `${file}:${line ?? ''}` : `?:${code ?? ''}`;
}

/** Each distinct source line of the report's kernels, in first-seen order, with the kernels from it. */
export function userLines(kernels: Kernel[]): UserLine[] {
  const lines = new Map<string, UserLine>();
  for (const kernel of kernels) {
    for (const source of kernel.sources ?? []) {
      if (!source.file && !source.code) {
        continue;
      }
      const key = lineKey(source.file, source.line, source.code);
      let entry = lines.get(key);
      if (!entry) {
        entry = { key, file: source.file, line: source.line, code: source.code, module: source.module, kernels: [] };
        lines.set(key, entry);
      }
      if (!entry.kernels.includes(kernel.name)) {
        entry.kernels.push(kernel.name);
      }
    }
  }
  return [...lines.values()];
}

export class UserLineList {
  readonly node = el('div', { className: 'jp-torchfuser-user-lines' });
  private lines: UserLine[] = [];

  constructor(private readonly onSelect: (line: UserLine) => void) {
    onActivate(this.node, '.jp-torchfuser-user-line', row => {
      const line = this.lines.find(l => l.key === row.getAttribute('data-line'));
      if (line) {
        this.onSelect(line);
      }
    });
  }

  render(report: Report | null): void {
    clear(this.node);
    this.lines = userLines(report?.kernels ?? []);
    this.node.hidden = this.lines.length === 0;
    if (!this.lines.length) {
      return;
    }
    this.node.append(
      el('div', { className: 'jp-torchfuser-subtitle', text: 'Your lines → kernels' }),
      el(
        'ul',
        { className: 'jp-torchfuser-user-line-list' },
        this.lines.map(line =>
          el('li', { className: 'jp-torchfuser-user-line', attrs: { 'data-line': line.key, tabindex: 0, role: 'button' } }, [
            el('span', { className: 'jp-torchfuser-user-line-where', text: formatLocation(line.file, line.line) || line.module || '?' }),
            el('code', { className: 'jp-torchfuser-user-line-code', text: line.code ?? '' }),
            el('span', { className: 'jp-torchfuser-user-line-kernels', text: `→ ${line.kernels.join(', ')}` })
          ])
        )
      )
    );
  }

  /** Highlights the lines `kernel` came from (none for null), or exactly the lines in `keys`. */
  highlight(selection: { kernel?: string | null; keys?: Iterable<string> }): void {
    const keys = selection.keys ? new Set(selection.keys) : null;
    for (const row of Array.from(this.node.querySelectorAll('.jp-torchfuser-user-line'))) {
      const line = this.lines.find(l => l.key === row.getAttribute('data-line'));
      const on = keys ? keys.has(line?.key ?? '') : Boolean(selection.kernel && line?.kernels.includes(selection.kernel));
      row.classList.toggle('jp-torchfuser-highlight', on);
    }
  }
}
