/** The worker pool: replies by id, spreads work, and falls back to the page when workers fail. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WorkerLayoutEngine } from '../view/layout_engine';

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
