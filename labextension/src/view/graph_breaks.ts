/**
 * Graph breaks and recompiles (.jp-torchfuser-breaks): for each report, the
 * break that ended its graph (Dynamo's reason and explanation, the user's
 * file:line and code, hints) and why Dynamo compiled the frame again. All of
 * it is user or Dynamo text: rendered as text only.
 */
import { el } from './dom';
import { formatLocation } from './format';
import type { Report } from './schema';

function breakEntry(report: Report, index: number): HTMLElement | null {
  const graphBreak = report.graph_break;
  const recompile = report.recompile_reason;
  if (!graphBreak && !recompile) {
    return null;
  }
  const where = graphBreak ? formatLocation(graphBreak.file, graphBreak.line) : '';
  return el('li', { className: 'jp-torchfuser-break', attrs: { 'data-report': index } }, [
    el('div', { className: 'jp-torchfuser-break-graph', text: report.title }),
    graphBreak && el('div', { className: 'jp-torchfuser-break-reason', text: `graph break: ${graphBreak.reason}` }),
    graphBreak?.explanation && el('div', { className: 'jp-torchfuser-break-explanation', text: graphBreak.explanation }),
    graphBreak && (where || graphBreak.code) &&
      el('div', { className: 'jp-torchfuser-break-where' }, [
        el('span', { className: 'jp-torchfuser-break-location', text: where || 'unknown location' }),
        graphBreak.code ? el('code', { className: 'jp-torchfuser-break-code', text: graphBreak.code }) : null
      ]),
    graphBreak && graphBreak.hints.length > 0 &&
      el('ul', { className: 'jp-torchfuser-break-hints' }, graphBreak.hints.map(hint => el('li', { text: hint }))),
    recompile && el('div', { className: 'jp-torchfuser-recompile', text: `recompiled because: ${recompile}` })
  ]);
}

/** The list, or null when no report has a break or a recompile reason. */
export function renderBreaks(reports: Report[], onSelectReport: (index: number) => void): HTMLElement | null {
  const entries = reports.map(breakEntry).filter((entry): entry is HTMLElement => entry !== null);
  if (!entries.length) {
    return null;
  }
  const list = el('ol', { className: 'jp-torchfuser-break-list' }, entries);
  // The graph's title opens that report.
  list.addEventListener('click', event => {
    const title = (event.target as Element).closest?.('.jp-torchfuser-break-graph');
    const index = title?.closest('[data-report]')?.getAttribute('data-report');
    if (index !== null && index !== undefined) {
      onSelectReport(Number(index));
    }
  });
  return el('div', { className: 'jp-torchfuser-breaks' }, [
    el('div', { className: 'jp-torchfuser-subtitle', text: 'Graph breaks and recompiles' }),
    list
  ]);
}
