/**
 * Graph breaks and recompiles: each report's break (reason, explanation,
 * file:line and code, hints) and recompile reason, as text only; user lines
 * → kernels and back.
 */
import { describe, expect, it } from 'vitest';
import { ExplorerView } from '../view/explorer_view';
import { userLines } from '../view/user_lines';
import { HOSTILE, loadFixture, mountView, useStubbedLayout } from './fixtures';

const mount = mountView;

useStubbedLayout();

describe('graph breaks and recompiles', () => {
  it('lists the break of a real report: reason, explanation, user line, hints, recompile reason', async () => {
    await mount(loadFixture('history_bundle.json'));
    const entries = Array.from(document.querySelectorAll('.jp-torchfuser-breaks .jp-torchfuser-break'));
    expect(entries).toHaveLength(2); // the first graph broke at print; both were recompiled
    const first = entries[0];
    expect(first.querySelector('.jp-torchfuser-break-graph')!.textContent).toBe('scaled_then_printed #2 forward');
    expect(first.querySelector('.jp-torchfuser-break-reason')!.textContent).toBe('graph break: Failed to trace builtin operator');
    expect(first.querySelector('.jp-torchfuser-break-explanation')!.textContent).toContain('`print`');
    expect(first.querySelector('.jp-torchfuser-break-location')!.textContent).toMatch(/history_bundle\.py:\d+$/);
    expect(first.querySelector('.jp-torchfuser-break-code')!.textContent).toBe('print("a graph break")');
    expect(first.querySelectorAll('.jp-torchfuser-break-hints li').length).toBeGreaterThan(0);
    expect(first.querySelector('.jp-torchfuser-recompile')!.textContent).toMatch(/^recompiled because: /);
    expect(entries[1].querySelector('.jp-torchfuser-break-reason')).toBeNull();
  });

  it('is absent when no report has a break or a recompile', async () => {
    await mount(loadFixture('mlp_bundle.json'));
    expect(document.querySelector('.jp-torchfuser-breaks')).toBeNull();
  });

  it('renders hostile text (breaks, recompiles, unfused reasons, runs) as text and runs nothing', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    bundle.reports[0].graph_break = {
      reason: HOSTILE,
      explanation: `<script>window.__x=2</script>`,
      hints: [HOSTILE],
      file: `${HOSTILE}.py`,
      line: 3,
      code: HOSTILE
    };
    bundle.reports[0].recompile_reason = HOSTILE;
    bundle.reports[0].passes[0].unfused = [[HOSTILE, HOSTILE]];
    const kernel = { name: HOSTILE, kind: HOSTILE, uses: 1, seconds_per_call: 1e-6 };
    bundle.runs = [1, 2].map(number => ({ number, enabled_passes: [HOSTILE], reused: false, graphs: 1, kernels: [kernel], eager_seconds: null, compiled_seconds: null, speedup: null }));
    await mount(bundle);
    for (const pick of Array.from(document.querySelectorAll<HTMLInputElement>('input.jp-torchfuser-run-pick'))) {
      pick.checked = true;
      pick.dispatchEvent(new Event('change', { bubbles: true }));
    }
    expect(document.querySelector('.jp-torchfuser-run-compare')!.textContent).toContain(HOSTILE);
    expect(document.querySelector('.jp-torchfuser-unfused li')!.textContent).toBe(`${HOSTILE}: ${HOSTILE}`);
    expect(document.querySelector('.jp-torchfuser-view img, .jp-torchfuser-view script')).toBeNull();
    const breaks = document.querySelector('.jp-torchfuser-breaks')!;
    expect(breaks.querySelector('img, script')).toBeNull();
    expect(breaks.querySelector('.jp-torchfuser-break-reason')!.textContent).toBe(`graph break: ${HOSTILE}`);
    expect(breaks.querySelector('.jp-torchfuser-break-location')!.textContent).toBe(`${HOSTILE}.py:3`);
    expect(breaks.querySelector('.jp-torchfuser-break-code')!.textContent).toBe(HOSTILE);
    expect(breaks.querySelector('.jp-torchfuser-recompile')!.textContent).toBe(`recompiled because: ${HOSTILE}`);
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(window.__x).toBeUndefined();
  });

  it('ignores malformed break fields instead of failing the report', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    bundle.reports[0].graph_break = { reason: 7, hints: 'not a list', line: 'x' };
    await mount(bundle);
    expect(document.querySelector('.jp-torchfuser-break-reason')!.textContent).toBe('graph break: 7');
    expect(document.querySelector('.jp-torchfuser-break-hints')).toBeNull();
  });
});

describe('user lines → kernels', () => {
  it('collects each distinct source line of the kernels with the kernels from it', () => {
    const kernels = loadFixture('history_bundle.json');
    const view = new ExplorerView({ interactive: false });
    view.setBundle(kernels);
    const lines = userLines(view.report!.kernels);
    expect(lines.map(l => [l.code, l.kernels])).toEqual([['y = torch.relu(x @ w) * 2 + 1', ['tf_gemm_f55ee30165']]]);
  });

  it('a click on a line highlights its kernel nodes; a click on a kernel node highlights its lines', async () => {
    await mount(loadFixture('mlp_bundle.json'));
    const lines = Array.from(document.querySelectorAll('.jp-torchfuser-user-line'));
    expect(lines.length).toBeGreaterThan(0);
    lines[0].dispatchEvent(new MouseEvent('click', { bubbles: true }));
    const highlighted = Array.from(document.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-highlight'));
    expect(highlighted.length).toBeGreaterThan(0);
    expect(highlighted.every(g => g.classList.contains('jp-torchfuser-kernel'))).toBe(true);
    expect(lines[0].classList.contains('jp-torchfuser-highlight')).toBe(true);

    const kernelNode = document.querySelector('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel')!;
    kernelNode.querySelector('text')!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    expect(document.querySelectorAll('g.node.jp-torchfuser-highlight')).toHaveLength(0);
    const name = kernelNode.getAttribute('data-node-id')!;
    const marked = Array.from(document.querySelectorAll('.jp-torchfuser-user-line.jp-torchfuser-highlight'));
    expect(marked.length).toBeGreaterThan(0);
    expect(marked.every(l => l.textContent!.includes(name))).toBe(true);

    // Enter on a focused line chooses it too.
    lines[0].dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(document.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-highlight').length).toBeGreaterThan(0);
  });
});
