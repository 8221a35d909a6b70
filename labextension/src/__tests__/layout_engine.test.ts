/** The worker pool: replies by id, spreads work, and falls back to the page when workers fail. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LayoutCache, setLayoutEngine, WorkerLayoutEngine, workerCount } from '../view/layout_engine';

type Mode = 'answer' | 'fail';
let mode: Mode = 'answer';
const started: FakeWorker[] = [];

class FakeWorker {
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onerror: ((event: { preventDefault(): void }) => void) | null = null;
  received: unknown[] = [];
  terminated = false;
  constructor(readonly url: string) {
    started.push(this);
  }
  postMessage(message: { id: number; dot: string }) {
    this.received.push(message);
    setTimeout(() => {
      if (mode === 'fail') {
        this.onerror?.({ preventDefault() {} });
      } else {
        this.onmessage?.({ data: { id: message.id, svg: `<svg>${message.dot}</svg>` } });
      }
    }, 1);
  }
  terminate() {
    this.terminated = true;
  }
}

const PAGE_SCRIPT = 'globalThis.__torchfuserLayout = async dot => "<svg>page:" + dot + "</svg>";';

beforeEach(() => {
  mode = 'answer';
  started.length = 0;
  (globalThis as any).Worker = FakeWorker;
  (URL as any).createObjectURL = () => 'blob:layout';
  delete (globalThis as any).__torchfuserLayout;
});
afterEach(() => {
  delete (globalThis as any).Worker;
  delete (globalThis as any).__torchfuserLayout;
});

describe('worker layout engine', () => {
  it('answers each request with its own reply and uses both workers', async () => {
    const engine = new WorkerLayoutEngine(PAGE_SCRIPT, 2);
    const [a, b] = await Promise.all([engine.renderSvg('digraph a {}'), engine.renderSvg('digraph b {}')]);
    expect(a).toBe('<svg>digraph a {}</svg>');
    expect(b).toBe('<svg>digraph b {}</svg>');
    expect(started.map(w => w.received.length)).toEqual([1, 1]);
  });

  it('finishes pending and later work on the page when a worker cannot run', async () => {
    mode = 'fail';
    const engine = new WorkerLayoutEngine(PAGE_SCRIPT, 2);
    expect(await engine.renderSvg('digraph a {}')).toBe('<svg>page:digraph a {}</svg>');
    expect(started.every(w => w.terminated)).toBe(true);
    expect(await engine.renderSvg('digraph b {}')).toBe('<svg>page:digraph b {}</svg>');
  });
});

describe('layout cache (one per view)', () => {
  afterEach(() => setLayoutEngine(null));

  function countingEngine(fail = new Set<string>()) {
    const calls: string[] = [];
    setLayoutEngine({
      async renderSvg(dot: string) {
        calls.push(dot);
        if (fail.has(dot)) {
          throw new Error(`cannot lay out ${dot}`);
        }
        return `<svg>${dot}</svg>`;
      }
    });
    return calls;
  }

  it('lays out a DOT once, sharing a request in flight', async () => {
    const calls = countingEngine();
    const cache = new LayoutCache();
    const [a, b] = await Promise.all([cache.renderSvg('digraph a {}'), cache.renderSvg('digraph a {}')]);
    expect(a).toBe(b);
    expect(await cache.renderSvg('digraph a {}')).toBe('<svg>digraph a {}</svg>');
    expect(calls).toEqual(['digraph a {}']);
    expect(cache.layouts).toBe(1);
  });

  it('does not keep failures, and drops the least recently used past its size', async () => {
    const calls = countingEngine(new Set(['bad']));
    const cache = new LayoutCache(80); // each entry below: DOT and SVG, 35 characters
    await expect(cache.renderSvg('bad')).rejects.toThrow('cannot lay out bad');
    await expect(cache.renderSvg('bad')).rejects.toThrow();
    expect(calls.filter(dot => dot === 'bad')).toHaveLength(2);
    await cache.renderSvg('digraph a {}');
    await cache.renderSvg('digraph b {}');
    await cache.renderSvg('digraph a {}'); // a is now the most recent
    await cache.renderSvg('digraph c {}'); // over 80: b, the least recent, goes
    await cache.renderSvg('digraph a {}');
    await cache.renderSvg('digraph b {}');
    expect(calls.filter(dot => dot.startsWith('digraph'))).toEqual(['digraph a {}', 'digraph b {}', 'digraph c {}', 'digraph b {}']);
  });

  it('uses a second worker only with cores to spare', () => {
    expect([1, 2, 3, 4, 16].map(workerCount)).toEqual([1, 1, 1, 2, 2]);
  });
});
