/**
 * Symbolic sizes: a graph compiled once for every length shows its dynamic dims as
 * expressions ("s0 + 1"), as text, beside the static ones.
 */
import { describe, expect, it } from 'vitest';
import { formatShape } from '../view/format';

describe('formatShape', () => {
  it('shows static and symbolic dims side by side', () => {
    expect(formatShape([1, 8, 's87 + 1', 64], 'float32')).toBe('[1, 8, s87 + 1, 64] float32');
  });

  it('keeps the old numeric form', () => {
    expect(formatShape([4, 64], null)).toBe('[4, 64]');
    expect(formatShape(null, 'int64')).toBe('int64');
  });
});
