/**
 * User-timing measures (performance.measure) that harnesses and the browser
 * tests read to see where the time goes; they cost nothing otherwise.
 * `detail` says which report, as several views may share a page.
 */
export function measureSpan(name: string, start: number, end = performance.now(), detail?: unknown): void {
  try {
    performance.measure?.(name, { start, end, detail });
  } catch {
    // engines without measure options: timing is optional
  }
}
