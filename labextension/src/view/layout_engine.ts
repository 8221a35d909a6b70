/**
 * Graphviz in WebAssembly, loaded on first use and shared by every view on the
 * page. Layout runs in Web Workers (so the page stays responsive; two where
 * there are cores for both graphs of a pass at once); where workers cannot
 * start (a strict Content-Security-Policy), the same code runs on the page.
 * Tests install a stub instead.
 */

export interface LayoutEngine {
  /** DOT text → SVG text */
  renderSvg(dot: string): Promise<string>;
}

interface LayoutReply {
  id: number;
  svg?: string;
  error?: string;
}

interface Pending {
  dot: string;
  resolve(svg: string): void;
  reject(error: Error): void;
}

type LayoutFunction = (dot: string) => Promise<string>;

let override: LayoutEngine | null = null;
let loading: Promise<LayoutEngine> | null = null;

/** Runs the layout script on the page; it then registers a layout function instead of a message handler. */
export function mainThreadEngine(code: string): LayoutEngine {
  const scope = globalThis as unknown as { __torchfuserLayout?: LayoutFunction };
  if (!scope.__torchfuserLayout) {
    // The script is our own build output (src/layout_worker.ts), never report data.
    new Function(code)();
  }
  const layout = scope.__torchfuserLayout;
  if (!layout) {
    throw new Error('the Graphviz layout script did not load');
  }
  return { renderSvg: dot => layout(dot) };
}

/** A small pool of layout workers; on any worker failure it finishes the work on the page. */
export class WorkerLayoutEngine implements LayoutEngine {
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private nextWorker = 0;
  private fallback: LayoutEngine | null = null;

  constructor(
    private readonly code: string,
    size: number
  ) {
    const url = URL.createObjectURL(new Blob([code], { type: 'text/javascript' }));
    for (let i = 0; i < size; i++) {
      const worker = new Worker(url);
      worker.onmessage = (event: MessageEvent<LayoutReply>) => this.settle(event.data);
      worker.onerror = event => {
        event.preventDefault?.();
        this.fallBack();
      };
      this.workers.push(worker);
    }
  }

  renderSvg(dot: string): Promise<string> {
    if (this.fallback) {
      return this.fallback.renderSvg(dot);
    }
    const id = ++this.nextId;
    const worker = this.workers[this.nextWorker++ % this.workers.length];
    return new Promise<string>((resolve, reject) => {
      this.pending.set(id, { dot, resolve, reject });
      worker.postMessage({ id, dot });
    });
  }

  private settle(reply: LayoutReply): void {
    const request = this.pending.get(reply.id);
    if (!request) {
      return;
    }
    this.pending.delete(reply.id);
    if (reply.error !== undefined || reply.svg === undefined) {
      request.reject(new Error(reply.error ?? 'layout failed'));
    } else {
      request.resolve(reply.svg);
    }
  }

  /** A worker could not start or crashed: stop them all and lay out on the page from now on. */
  private fallBack(): void {
    if (this.fallback) {
      return;
    }
    for (const worker of this.workers) {
      worker.terminate();
    }
    const requests = [...this.pending.values()];
    this.pending.clear();
    try {
      this.fallback = mainThreadEngine(this.code);
    } catch (error) {
      this.fallback = { renderSvg: () => Promise.reject(error) };
    }
    for (const request of requests) {
      this.fallback.renderSvg(request.dot).then(request.resolve, request.reject);
    }
  }
}

/**
 * Two workers lay out the before and after graphs side by side, but only with
 * CPUs to spare: on two cores the page, the second worker's Graphviz compile
 * and the first layout all compete, and one worker draws first sooner.
 */
export function workerCount(cores: number): number {
  return cores >= 4 ? 2 : 1;
}

async function loadEngine(): Promise<LayoutEngine> {
  const { LAYOUT_WORKER_CODE } = await import('../generated/layout_worker_code');
  if (typeof Worker !== 'undefined' && typeof Blob !== 'undefined' && typeof URL.createObjectURL === 'function') {
    try {
      const cores = typeof navigator !== 'undefined' ? navigator.hardwareConcurrency || 1 : 1;
      return new WorkerLayoutEngine(LAYOUT_WORKER_CODE, workerCount(cores));
    } catch {
      // fall through: lay out on the page
    }
  }
  return mainThreadEngine(LAYOUT_WORKER_CODE);
}

let loaded = false;

/** True once Graphviz is loaded (or a stand-in installed): a layout can start at once. */
export function layoutEngineReady(): boolean {
  return override !== null || loaded;
}

export function getLayoutEngine(): Promise<LayoutEngine> {
  if (override) {
    return Promise.resolve(override);
  }
  if (!loading) {
    loading = loadEngine().then(
      engine => {
        loaded = true;
        return engine;
      }
    ).catch(error => {
      loading = null; // let a later render retry
      throw error;
    });
  }
  return loading;
}

interface CachedLayout {
  svg: Promise<string>;
  chars: number;
}

/**
 * SVG per DOT text for one view: the same DOT (a snapshot drawn again after a
 * pass switch, or the unchanged before and after of a pass) is laid out once.
 * Requests in flight are shared; failures are not kept. Only when the cached
 * SVG passes `maxChars` in all are the least recently used entries dropped.
 */
export class LayoutCache implements LayoutEngine {
  private readonly entries = new Map<string, CachedLayout>();
  private chars = 0;
  /** Layouts actually requested from Graphviz (for tests and the harness). */
  layouts = 0;

  constructor(private readonly maxChars = 48_000_000) {}

  renderSvg(dot: string): Promise<string> {
    const hit = this.entries.get(dot);
    if (hit) {
      this.entries.delete(dot); // re-insert: most recently used last
      this.entries.set(dot, hit);
      return hit.svg;
    }
    this.layouts++;
    const entry: CachedLayout = { svg: getLayoutEngine().then(engine => engine.renderSvg(dot)), chars: 0 };
    this.entries.set(dot, entry);
    entry.svg.then(
      svg => {
        if (this.entries.get(dot) === entry) {
          entry.chars = svg.length + dot.length;
          this.chars += entry.chars;
          this.evict(entry);
        }
      },
      () => {
        if (this.entries.get(dot) === entry) {
          this.entries.delete(dot);
        }
      }
    );
    return entry.svg;
  }

  private evict(keep: CachedLayout): void {
    for (const [dot, entry] of this.entries) {
      if (this.chars <= this.maxChars) {
        break;
      }
      if (entry !== keep && entry.chars > 0) {
        this.entries.delete(dot);
        this.chars -= entry.chars;
      }
    }
  }
}

/** For tests and harnesses: replace (or with null, restore) the Graphviz engine. */
export function setLayoutEngine(engine: LayoutEngine | null): void {
  override = engine;
}
