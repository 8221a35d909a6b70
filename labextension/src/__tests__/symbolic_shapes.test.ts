/**
 * Symbolic sizes: a graph compiled once for every length shows its dynamic dims as
 * expressions ("s0 + 1"), the sizes its plan ran with, and why Dynamo recompiled, as text.
 */
import { describe, expect, it } from 'vitest';
import { formatShape } from '../view/format';
import { renderShapes } from '../view/summary';
import { loadFixture } from './fixtures';

const HOSTILE = '<img src=x onerror="window.__x=1">';

describe('formatShape', () => {
  it('shows static and symbolic dims side by side', () => {
    expect(formatShape([1, 8, 's87 + 1', 64], 'float32')).toBe('[1, 8, s87 + 1, 64] float32');
  });

  it('keeps the old numeric form', () => {
    expect(formatShape([4, 64], null)).toBe('[4, 64]');
    expect(formatShape(null, 'int64')).toBe('int64');
  });
});

describe('renderShapes', () => {
  function report(extra: object): any {
    return { ...loadFixture('mlp_bundle.json').reports[0], ...extra };
  }

  it('is absent for a static first compile (and for reports written before these fields)', () => {
    expect(renderShapes(report({}))).toBeNull();
    expect(renderShapes(report({ dynamic: null, recompile_reason: null }))).toBeNull();
  });

  it('lists the symbols, their example values, the sizes run and the recompile reason', () => {
    const node = renderShapes(
      report({
        dynamic: { symbols: ['s0', 's1'], example: [13, 2], runs: [{ sizes: [14, 2], calls: 3 }] },
        recompile_reason: "tensor 'x' size mismatch at index 0. expected 3, actual 7"
      })
    )!;
    expect(node.textContent).toContain('Dynamic sizes s0, s1: compiled once, at s0 = 13, s1 = 2');
    expect(node.textContent).toContain('Ran with: 14, 2 (3×)');
    expect(node.textContent).toContain('Recompiled because: tensor');
  });

  it('shows a hostile reason as text', () => {
    const node = renderShapes(report({ recompile_reason: HOSTILE }))!;
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
  });
});
