/**
 * Eager vs compiled, drawn as two bars on one scale; the compiled bar is split
 * into one segment per kernel (device time per graph call) and one for the
 * host overhead (.jp-torchfuser-overhead: launching kernels, Python, ops that
 * ran in PyTorch): the report's timings.host_overhead_seconds, or for reports
 * written before that field, the compiled time less the kernels' time. Below
 * it, how steady calls ran: replayed from a tape, or why they walk the plan.
 */
import { el } from './dom';
import { formatSeconds } from './format';
import type { Replay, Report } from './schema';

const LEGEND_KERNELS = 12;
export const OVERHEAD_MEANING = 'launching kernels, Python, ops in PyTorch';
/** Hatched, so it reads as "not a kernel" in both themes; a constant, never report data. */
const OVERHEAD_BACKGROUND =
  'repeating-linear-gradient(135deg, var(--tf-fg-muted, #616161) 0 2px, var(--tf-bg-sunk, #eeeeee) 2px 5px)';

function isFiniteNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Host time per graph call outside the kernels: the report's
 * host_overhead_seconds, else compiled_seconds - kernelTotal (clamped at 0);
 * null when the compiled time was not measured.
 */
export function hostOverhead(report: Report, kernelTotal: number): number | null {
  const timings = report.timings;
  if (isFiniteNumber(timings?.host_overhead_seconds)) {
    return Math.max(0, timings.host_overhead_seconds);
  }
  if (isFiniteNumber(timings?.compiled_seconds)) {
    return Math.max(0, timings.compiled_seconds - kernelTotal);
  }
  return null;
}

/**
 * One line on how steady calls ran (the report's replay); null when there is
 * nothing to say: no calls yet, no reason recorded, or a report without it.
 */
export function replayLine(replay: Replay | null | undefined): string | null {
  if (!replay) {
    return null;
  }
  const { calls, replayed, launches, run_as: runAs, new_sizes: newSizes, new_sizes_walk_because: newSizesReason } = replay;
  const resized = newSizesReason
    ? `; new sizes walk the plan: ${newSizesReason}`
    : newSizes !== undefined && newSizes > 0
      ? `, ${newSizes} at new sizes`
      : '';
  if (replayed > 0) {
    const chained = launches !== null && runAs !== null && runAs < launches ? ` (${launches} launches run as ${runAs})` : '';
    return `Steady calls: ${replayed} of ${calls} replayed from a tape${chained}${resized}`;
  }
  return calls > 0 && replay.walks_because ? `Steady calls walk the plan: ${replay.walks_because}${resized}` : null;
}

export interface KernelSegment {
  name: string;
  seconds: number;
}

/** Per-call device time of each kernel; `calls` is how often the graph ran. */
export function kernelSegments(report: Report): KernelSegment[] {
  const calls = report.timings?.calls ?? null;
  return report.kernels
    .map(kernel => {
      let seconds = 0;
      if (calls && calls > 0 && Number.isFinite(kernel.seconds)) {
        seconds = kernel.seconds / calls;
      } else if (kernel.mean_seconds !== null && Number.isFinite(kernel.mean_seconds)) {
        seconds = kernel.mean_seconds;
      }
      return { name: kernel.name, seconds };
    })
    .filter(segment => segment.seconds > 0);
}

function bar(label: string, seconds: number | null, scale: number, children: HTMLElement[], className: string): HTMLElement {
  const track = el('div', { className: 'jp-torchfuser-timing-track' });
  const fill = el('div', { className: `jp-torchfuser-timing-fill ${className}` }, children);
  fill.style.width = `${seconds !== null && scale > 0 ? Math.min(100, (100 * seconds) / scale) : 0}%`;
  track.appendChild(fill);
  return el('div', { className: 'jp-torchfuser-timing-row' }, [
    el('span', { className: 'jp-torchfuser-timing-label', text: label }),
    track,
    el('span', { className: 'jp-torchfuser-timing-value', text: formatSeconds(seconds) })
  ]);
}

export function renderTimingBar(
  report: Report,
  colorOfKernel: (name: string) => string | undefined,
  onKernelClick: (name: string) => void
): HTMLElement {
  const timings = report.timings ?? { eager_seconds: null, compiled_seconds: null, speedup: null };
  const segments = kernelSegments(report);
  const kernelTotal = segments.reduce((sum, s) => sum + s.seconds, 0);
  const eager = timings.eager_seconds ?? null;
  const compiled = timings.compiled_seconds ?? (kernelTotal > 0 ? kernelTotal : null);
  const overhead = hostOverhead(report, kernelTotal);
  const kernelSeconds = isFiniteNumber(timings.kernel_seconds) ? timings.kernel_seconds : kernelTotal;
  const scale = Math.max(eager ?? 0, compiled ?? 0, kernelTotal);
  // Widths are relative to the compiled bar: kernels first, then the host overhead.
  const whole = Math.max(compiled ?? 0, kernelTotal + (overhead ?? 0));
  const share = (seconds: number) => `${whole > 0 ? (100 * seconds) / whole : 0}%`;

  const segmentElements = segments.map(segment => {
    const part = el('div', {
      className: 'jp-torchfuser-timing-kernel',
      attrs: { 'data-kernel': segment.name, title: `${segment.name}: ${formatSeconds(segment.seconds)} per call` }
    });
    part.style.width = share(segment.seconds);
    part.style.background = safeColor(colorOfKernel(segment.name));
    part.addEventListener('click', () => onKernelClick(segment.name));
    return part;
  });
  if (overhead !== null) {
    const part = el('div', {
      className: 'jp-torchfuser-overhead',
      attrs: { title: `host overhead: ${formatSeconds(overhead)} per call (${OVERHEAD_MEANING})` }
    });
    part.style.width = share(overhead);
    part.style.height = '100%';
    part.style.flex = '0 0 auto';
    part.style.backgroundImage = OVERHEAD_BACKGROUND;
    segmentElements.push(part);
  }

  const replay = replayLine(report.replay);
  const speedup = timings.speedup ?? (eager && compiled ? eager / compiled : null);
  const headline =
    speedup !== null && Number.isFinite(speedup)
      ? speedup >= 1
        ? `${speedup.toFixed(2)}× faster than eager`
        : `${(1 / speedup).toFixed(2)}× slower than eager`
      : eager === null
        ? 'eager time not measured'
        : '';
  // Big graphs have hundreds of kernels: the legend names the slowest ones.
  const slowest = [...segments].sort((a, b) => b.seconds - a.seconds).slice(0, LEGEND_KERNELS);
  const legend = el(
    'ul',
    { className: 'jp-torchfuser-timing-legend' },
    slowest.map(segment =>
      el('li', { attrs: { 'data-kernel': segment.name } }, [
        el('span', { className: 'jp-torchfuser-swatch', attrs: { style: `background:${safeColor(colorOfKernel(segment.name))}` } }),
        el('span', { text: `${segment.name} ${formatSeconds(segment.seconds)}` })
      ])
    )
  );
  if (overhead !== null) {
    legend.insertBefore(
      el('li', { className: 'jp-torchfuser-overhead-key', attrs: { title: OVERHEAD_MEANING } }, [
        el('span', { className: 'jp-torchfuser-swatch', attrs: { style: `background-image:${OVERHEAD_BACKGROUND}` } }),
        el('span', { text: `host overhead ${formatSeconds(overhead)}` })
      ]),
      legend.firstChild
    );
  }
  if (segments.length > slowest.length) {
    legend.appendChild(el('li', { className: 'jp-torchfuser-hint', text: `… ${segments.length - slowest.length} faster kernels` }));
  }
  legend.addEventListener('click', event => {
    const item = (event.target as Element).closest?.('li[data-kernel]');
    const name = item?.getAttribute('data-kernel');
    if (name) {
      onKernelClick(name);
    }
  });
  return el('div', { className: 'jp-torchfuser-timing' }, [
    el('div', { className: 'jp-torchfuser-subtitle', text: `Time per call${headline ? ` · ${headline}` : ''}` }),
    bar('eager', eager, scale, [], 'jp-torchfuser-timing-eager'),
    bar('compiled', compiled, scale, segmentElements, 'jp-torchfuser-timing-compiled'),
    overhead !== null && compiled !== null
      ? el('div', {
          className: 'jp-torchfuser-hint jp-torchfuser-timing-split',
          text:
            `compiled ${formatSeconds(compiled)} = kernels ${formatSeconds(kernelSeconds)}` +
            ` + host overhead ${formatSeconds(overhead)} (${OVERHEAD_MEANING})`
        })
      : null,
    // The reason is report text: textContent only (el's `text`).
    replay !== null ? el('div', { className: 'jp-torchfuser-hint jp-torchfuser-timing-replay', text: replay }) : null,
    segments.length ? legend : el('div', { className: 'jp-torchfuser-hint', text: 'no kernel launches timed yet' })
  ]);
}

/** Colours come from DOT text; only plain colour values go into a style attribute. */
export function safeColor(color: string | undefined): string {
  return color && /^(#[0-9a-fA-F]{3,8}|[a-zA-Z]{3,20})$/.test(color) ? color : 'var(--jp-layout-color3)';
}
