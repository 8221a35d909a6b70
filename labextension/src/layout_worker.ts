/**
 * Graphviz layout off the main thread. Built on its own (scripts/build-worker.mjs)
 * into one script text that runs either as a Worker (from a blob URL) or, where
 * workers are not allowed, on the page: it then only registers a layout function.
 */
import { Graphviz } from '@hpcc-js/wasm-graphviz';

export interface LayoutRequest {
  id: number;
  dot: string;
}

export interface LayoutReply {
  id: number;
  svg?: string;
  error?: string;
}

let loading: Promise<Graphviz> | null = null;

async function layout(dot: string): Promise<string> {
  loading ??= Graphviz.load();
  const graphviz = await loading;
  return graphviz.dot(dot, 'svg');
}

interface WorkerScope {
  onmessage: ((event: MessageEvent<LayoutRequest>) => void) | null;
  postMessage(reply: LayoutReply): void;
}

const scope = globalThis as unknown as WorkerScope & { document?: unknown; __torchfuserLayout?: typeof layout };
if (typeof scope.document === 'undefined' && typeof scope.postMessage === 'function') {
  // Compile Graphviz as soon as the worker starts: the first layout request is then not kept waiting for it.
  loading = Graphviz.load();
  scope.onmessage = event => {
    const { id, dot } = event.data;
    layout(dot).then(
      svg => scope.postMessage({ id, svg }),
      error => scope.postMessage({ id, error: String((error as Error)?.message ?? error) })
    );
  };
} else {
  scope.__torchfuserLayout = layout;
}
