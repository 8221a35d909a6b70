/**
 * The JupyterLab MIME renderer: static view on its own, hand-over to the live
 * widget when the notebook's widget manager can draw it, static view again
 * when it cannot (saved notebook, no kernel).
 */
import { Widget } from '@lumino/widgets';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ReportRenderer, WIDGET_VIEW_MIME_TYPE } from '../lab_renderer';
import { setLayoutEngine } from '../view/layout_engine';
import { REPORT_MIME_TYPE } from '../view/schema';
import { loadFixture, stubGraphviz } from './fixtures';

type Behaviour = 'draws' | 'fails' | 'hangs';

function fakeRegistry(behaviour: Behaviour) {
  return {
    createRenderer: () => {
      const widget = new Widget();
      return Object.assign(widget, {
        renderModel: async () => {
          if (behaviour === 'draws') {
            const root = document.createElement('div');
            root.className = 'jp-torchfuser-view';
            root.setAttribute('data-interactive', '');
            widget.node.appendChild(root);
          } else if (behaviour === 'fails') {
            widget.node.textContent = 'Error displaying widget: model not found';
          } else {
            widget.node.textContent = 'Loading widget...';
            await new Promise(() => undefined);
          }
        }
      });
    }
  } as any;
}

function model(withWidget: boolean): any {
  const data: Record<string, unknown> = { [REPORT_MIME_TYPE]: loadFixture('mlp_bundle.json') };
  if (withWidget) {
    data[WIDGET_VIEW_MIME_TYPE] = { model_id: 'abc', version_major: 2, version_minor: 1 };
  }
  return { data, metadata: {}, trusted: true, setData: () => undefined };
}

const staticDrawn = (renderer: ReportRenderer) =>
  renderer.node.querySelectorAll('.jp-torchfuser-view:not([data-interactive]) .jp-torchfuser-graph[data-state="drawn"]').length;
const settle = () => new Promise(resolve => setTimeout(resolve, 30));

beforeEach(() => setLayoutEngine(stubGraphviz));
afterEach(() => {
  vi.useRealTimers();
  document.body.innerHTML = '';
  setLayoutEngine(null);
});

describe('the report MIME renderer', () => {
  it('draws the static view with toggles off when there is no widget', async () => {
    const renderer = new ReportRenderer(() => fakeRegistry('draws'));
    Widget.attach(renderer, document.body);
    await renderer.renderModel(model(false));
    expect(staticDrawn(renderer)).toBe(2);
    expect((renderer.node.querySelector('input.jp-torchfuser-pass-toggle') as HTMLInputElement).disabled).toBe(true);
  });

  it('hands over to the live widget and never lays out the static copy', async () => {
    const renderer = new ReportRenderer(() => fakeRegistry('draws'));
    Widget.attach(renderer, document.body);
    await renderer.renderModel(model(true));
    await settle();
    expect(renderer.node.querySelector('.jp-torchfuser-view[data-interactive]')).not.toBeNull();
    expect(staticDrawn(renderer)).toBe(0);
  });

  it('draws the static view when the widget model is gone', async () => {
    const renderer = new ReportRenderer(() => fakeRegistry('fails'));
    Widget.attach(renderer, document.body);
    await renderer.renderModel(model(true));
    await settle();
    expect(staticDrawn(renderer)).toBe(2);
  });

  it('draws the static view when the widget never answers (no kernel)', async () => {
    vi.useFakeTimers();
    const renderer = new ReportRenderer(() => fakeRegistry('hangs'));
    Widget.attach(renderer, document.body);
    await renderer.renderModel(model(true));
    await vi.advanceTimersByTimeAsync(3000);
    vi.useRealTimers();
    await settle();
    expect(staticDrawn(renderer)).toBe(2);
  });

  it('draws the static view outside notebooks (no widget manager found)', async () => {
    const renderer = new ReportRenderer(() => null);
    Widget.attach(renderer, document.body);
    await renderer.renderModel(model(true));
    await settle();
    expect(staticDrawn(renderer)).toBe(2);
  });
});
