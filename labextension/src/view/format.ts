/** Human-readable numbers for the view; all return plain text. */

export function formatSeconds(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return '–';
  }
  const abs = Math.abs(seconds);
  if (abs === 0) {
    return '0 s';
  }
  if (abs < 1e-3) {
    return `${(seconds * 1e6).toPrecision(3)} µs`;
  }
  if (abs < 1) {
    return `${(seconds * 1e3).toPrecision(3)} ms`;
  }
  return `${seconds.toPrecision(3)} s`;
}

export function formatShape(shape: (number | string)[] | null | undefined, dtype?: string | null): string {
  const dims = Array.isArray(shape) ? `[${shape.join(', ')}]` : '';
  return [dims, dtype ?? ''].filter(Boolean).join(' ');
}

export function formatLocation(file: string | null | undefined, line: number | null | undefined): string {
  if (!file) {
    return '';
  }
  return line === null || line === undefined ? file : `${file}:${line}`;
}
