/**
 * Graphviz in WebAssembly, loaded on first use (the module is ~800 kB) and
 * shared by every view on the page. Tests install a stub instead.
 */

export interface LayoutEngine {
  /** DOT text → SVG text */
  renderSvg(dot: string): Promise<string>;
}

let override: LayoutEngine | null = null;
let loading: Promise<LayoutEngine> | null = null;

async function loadGraphviz(): Promise<LayoutEngine> {
  const { Graphviz } = await import('@hpcc-js/wasm-graphviz');
  const graphviz = await Graphviz.load();
  return { renderSvg: async dot => graphviz.dot(dot, 'svg') };
}

export function getLayoutEngine(): Promise<LayoutEngine> {
  if (override) {
    return Promise.resolve(override);
  }
  if (!loading) {
    loading = loadGraphviz().catch(error => {
      loading = null; // let a later render retry
      throw error;
    });
  }
  return loading;
}

/** For tests and harnesses: replace (or with null, restore) the Graphviz engine. */
export function setLayoutEngine(engine: LayoutEngine | null): void {
  override = engine;
}
