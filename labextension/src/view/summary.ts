/**
 * The parts of the view that describe a whole report: the header (title,
 * device, compile time), the kernel table with cache badges, and the list of
 * ops that fell back to PyTorch.
 */
import { el } from './dom';
import { formatLocation, formatSeconds } from './format';
import { cacheBadge, laneBadge } from './source_pane';
import type { Report } from './schema';

export function renderHeader(report: Report): HTMLElement {
  const device = report.device
    ? `${report.device.name} (${report.device.type}, ${report.device.platform})`
    : 'no OpenCL device: everything ran in PyTorch';
  const timings = report.timings ?? {};
  const cache = { hit: 0, disk: 0, miss: 0 } as Record<string, number>;
  for (const kernel of report.kernels) {
    cache[kernel.cache] = (cache[kernel.cache] ?? 0) + 1;
  }
  const facts = [
    `${report.kernels.length} kernel${report.kernels.length === 1 ? '' : 's'}`,
    `${report.fallbacks.length} fallback${report.fallbacks.length === 1 ? '' : 's'}`,
    `cache: ${cache.hit} hit, ${cache.disk} disk, ${cache.miss} miss`,
    `compile ${formatSeconds(timings.compile_seconds ?? null)}`
  ];
  return el('div', { className: 'jp-torchfuser-header' }, [
    el('span', { className: 'jp-torchfuser-title', text: report.title }),
    el('span', { className: 'jp-torchfuser-device', text: device }),
    el('span', { className: 'jp-torchfuser-facts-line', text: facts.join(' · ') })
  ]);
}

export function renderReportSelector(
  titles: string[],
  selected: number,
  onSelect: (index: number) => void
): HTMLElement | null {
  if (titles.length < 2) {
    return null;
  }
  const select = el('select', { className: 'jp-torchfuser-report-select', attrs: { 'aria-label': 'compiled graph' } });
  titles.forEach((title, index) => {
    const option = el('option', { text: `${index + 1}. ${title}`, attrs: { value: index } });
    option.selected = index === selected;
    select.appendChild(option);
  });
  select.addEventListener('change', () => onSelect(Number(select.value)));
  return el('label', { className: 'jp-torchfuser-report-picker' }, [
    el('span', { text: `${titles.length} graphs (graph breaks): ` }),
    select
  ]);
}

export function renderKernelTable(report: Report, onKernelClick: (name: string) => void): HTMLElement {
  const rows = report.kernels.map(kernel =>
    el('tr', { attrs: { 'data-kernel': kernel.name } }, [
      el('td', {}, [
        el('button', { className: 'jp-torchfuser-kernel-link', text: kernel.name, attrs: { type: 'button', title: kernel.kind } })
      ]),
      el('td', {}, [cacheBadge(kernel.cache)]),
      el('td', {}, [laneBadge(kernel.lane, kernel.lane_reason) ?? '–']),
      el('td', { text: formatSeconds(kernel.build_seconds) }),
      el('td', { text: formatSeconds(kernel.mean_seconds) })
    ])
  );
  const table = el('table', { className: 'jp-torchfuser-kernels' }, [
    el('thead', {}, [
      el('tr', {}, ['kernel', 'cache', 'lane', 'build', 'per launch'].map(h => el('th', { text: h })))
    ]),
    el('tbody', {}, rows)
  ]);
  table.addEventListener('click', event => {
    const row = (event.target as Element).closest?.('tr[data-kernel]');
    const name = row?.getAttribute('data-kernel');
    if (name) {
      onKernelClick(name);
    }
  });
  return el('div', { className: 'jp-torchfuser-kernel-panel' }, [
    el('div', { className: 'jp-torchfuser-subtitle', text: 'Kernels' }),
    report.kernels.length ? table : el('div', { className: 'jp-torchfuser-hint', text: 'no fused kernels' })
  ]);
}

export function renderFallbacks(report: Report): HTMLElement | null {
  if (!report.fallbacks.length) {
    return null;
  }
  return el('div', { className: 'jp-torchfuser-fallbacks' }, [
    el('div', { className: 'jp-torchfuser-subtitle', text: 'Runs in PyTorch (fallbacks)' }),
    el(
      'ul',
      {},
      report.fallbacks.map(item =>
        el('li', { attrs: { 'data-node': item.node } }, [
          el('code', { text: item.op }),
          ` ${item.reason}`,
          item.module ? ` · ${item.module}` : '',
          item.file ? ` · ${formatLocation(item.file, item.line)}` : '',
          item.code ? el('code', { className: 'jp-torchfuser-user-code', text: item.code }) : null
        ])
      )
    )
  ]);
}

const RUNS_SHOWN = 12;

/** Symbolic sizes (what one plan ran with) and why Dynamo recompiled; null when there is neither. */
export function renderShapes(report: Report): HTMLElement | null {
  const dynamic = report.dynamic;
  const reason = report.recompile_reason;
  if (!dynamic && !reason) {
    return null;
  }
  const lines: (HTMLElement | null)[] = [];
  if (dynamic && dynamic.symbols.length) {
    const example = dynamic.symbols.map((s, i) => `${s} = ${dynamic.example[i]}`).join(', ');
    const runs = dynamic.runs
      .slice(0, RUNS_SHOWN)
      .map(run => `${run.sizes.join(', ')} (${run.calls}×)`)
      .join('; ');
    const more = dynamic.runs.length > RUNS_SHOWN ? `; … ${dynamic.runs.length - RUNS_SHOWN} more` : '';
    lines.push(el('div', { text: `Dynamic sizes ${dynamic.symbols.join(', ')}: compiled once, at ${example}` }));
    lines.push(el('div', { text: `Ran with: ${runs || 'not yet'}${more}` }));
  }
  if (reason) {
    lines.push(el('div', { text: `Recompiled because: ${reason}` }));
  }
  return el('div', { className: 'jp-torchfuser-shapes' }, lines);
}
