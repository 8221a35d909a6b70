/**
 * One check against the real Graphviz WebAssembly build: the DOT `class`
 * reaches the node <g>, and node ids come through as the schema ids.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ExplorerView } from '../view/explorer_view';
import { getLayoutEngine } from '../view/layout_engine';
import { loadFixture } from './fixtures';

afterEach(() => {
  document.body.innerHTML = '';
});

describe('real Graphviz (wasm)', () => {
  it('emits the kernel class and node ids that the view relies on', async () => {
    const engine = await getLayoutEngine();
    const report = loadFixture('mlp_bundle.json').reports[0];
    const svg = await engine.renderSvg(report.passes[0].graph_after.dot);
    expect(svg).toMatch(/<g id="tf_gemm_0" class="node jp&#45;torchfuser&#45;kernel">/);

    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(loadFixture('hostile_bundle.json'));
    await view.whenDrawn();
    const kernels = Array.from(document.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel'));
    expect(kernels.map(k => k.getAttribute('data-node-id')).sort()).toEqual(['tf_gemm_0', 'tf_gemm_1', 'tf_pointwise_2']);
    expect(document.querySelectorAll('img, script')).toHaveLength(0);
  });
});
