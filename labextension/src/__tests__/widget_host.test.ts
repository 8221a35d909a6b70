/** The anywidget contract: traits in, enabled_passes + save_changes + rerun message out. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { setLayoutEngine } from '../view/layout_engine';
import widget, { type AnyWidgetModel } from '../widget';

const render = widget.render;
import { loadFixture, stubGraphviz } from './fixtures';

class FakeModel implements AnyWidgetModel {
  values: Record<string, unknown>;
  listeners = new Map<string, Set<() => void>>();
  saved = 0;
  sent: unknown[] = [];
  constructor(values: Record<string, unknown>) {
    this.values = { ...values };
  }
  get(name: string) {
    return this.values[name];
  }
  set(name: string, value: unknown) {
    this.values[name] = value;
  }
  save_changes() {
    this.saved++;
  }
  send(content: unknown) {
    this.sent.push(content);
  }
  on(event: string, callback: () => void) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event)!.add(callback);
  }
  off(event: string, callback: () => void) {
    this.listeners.get(event)?.delete(callback);
  }
  /** What the kernel does: change a trait and fire change:<name>. */
  update(name: string, value: unknown) {
    this.values[name] = value;
    this.listeners.get(`change:${name}`)?.forEach(cb => cb());
  }
}

const settle = () => new Promise(resolve => setTimeout(resolve, 20));

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('anywidget host', () => {
  it('renders the bundle, follows trait changes and cleans up', async () => {
    const bundle = loadFixture('mlp_bundle.json');
    const model = new FakeModel({ bundle, enabled_passes: ['fuse_gemm_epilogue', 'fuse_pointwise'], status: 'idle' });
    const el = document.createElement('div');
    document.body.appendChild(el);
    const cleanup = render({ model, el });
    await settle();
    expect(el.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node.jp-torchfuser-kernel')).toHaveLength(3);

    model.update('status', 'running');
    expect(el.querySelector('.jp-torchfuser-status')!.textContent).toBe('running');

    // Re-run came back without the GEMM pass: the after graph changes.
    const without = loadFixture('mlp_bundle.json');
    const report = without.reports[0];
    report.passes[0].enabled = false;
    report.passes[0].graph_before = null;
    report.passes[0].graph_after = null;
    report.passes[1].graph_before = report.graphs.aten;
    report.passes[1].graph_after = report.graphs.aten;
    model.update('bundle', without);
    model.update('enabled_passes', ['fuse_pointwise']);
    model.update('status', 'idle');
    await settle();
    const after = Array.from(el.querySelectorAll('.jp-torchfuser-graph[data-side="after"] g.node')).map(g => g.getAttribute('data-node-id'));
    expect(after).toContain('addmm');
    expect(after).not.toContain('tf_gemm_0');
    expect((el.querySelector('input[data-pass="fuse_gemm_epilogue"]') as HTMLInputElement).checked).toBe(false);

    cleanup();
    expect([...model.listeners.values()].every(set => set.size === 0)).toBe(true);
    expect(el.querySelector('.jp-torchfuser-view')).toBeNull();
  });

  it('toggles save enabled_passes and Re-run sends the rerun message', async () => {
    const model = new FakeModel({ bundle: loadFixture('mlp_bundle.json'), enabled_passes: ['fuse_gemm_epilogue', 'fuse_pointwise'], status: '' });
    const el = document.createElement('div');
    document.body.appendChild(el);
    render({ model, el });
    await settle();
    const toggle = el.querySelector('input.jp-torchfuser-pass-toggle[data-pass="fuse_gemm_epilogue"]') as HTMLInputElement;
    toggle.checked = false;
    toggle.dispatchEvent(new Event('change', { bubbles: true }));
    expect(model.values.enabled_passes).toEqual(['fuse_pointwise']);
    expect(model.saved).toBe(1);
    (el.querySelector('button.jp-torchfuser-rerun') as HTMLButtonElement).click();
    expect(model.sent).toEqual([{ type: 'rerun', enabled_passes: ['fuse_pointwise'] }]);
  });
});
