/**
 * The JupyterLab host: a MIME renderer for application/vnd.torchfuser.report+json.
 *
 * It ranks ahead of the ipywidgets renderer on purpose. The explorer's output
 * carries both the widget view and the report; with no kernel (a saved
 * notebook reopened later) the widget cannot render, so this renderer always
 * draws the static view first and swaps in the live widget only once that
 * widget has actually drawn itself.
 */
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Panel, Widget } from '@lumino/widgets';
import { ExplorerView } from './view/explorer_view';
import { REPORT_MIME_TYPE } from './view/schema';

export const WIDGET_VIEW_MIME_TYPE = 'application/vnd.jupyter.widget-view+json';
/** ipywidgets registers at -10; lower ranks win. */
export const REPORT_RENDERER_RANK = -20;

/** Finds the rendermime registry of the notebook that holds `node` (where ipywidgets lives). */
export type RegistryFinder = (node: HTMLElement) => IRenderMimeRegistry | null;

export class ReportRenderer extends Panel implements IRenderMime.IRenderer {
  private readonly staticHolder = new Widget();
  private readonly staticView = new ExplorerView({ interactive: false });
  private live: IRenderMime.IRenderer | null = null;
  private pendingWidgetModel: IRenderMime.IMimeModel | null = null;
  private observer: MutationObserver | null = null;

  constructor(private readonly findRegistry: RegistryFinder | null) {
    super();
    this.addClass('jp-torchfuser-renderer');
    this.staticHolder.node.appendChild(this.staticView.node);
    this.addWidget(this.staticHolder);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.staticView.setBundle(model.data[REPORT_MIME_TYPE]);
    if (model.data[WIDGET_VIEW_MIME_TYPE] && !this.live && this.findRegistry) {
      this.pendingWidgetModel = model;
      if (this.isAttached) {
        this.startLiveWidget();
      }
    }
    await this.staticView.whenDrawn();
  }

  protected onAfterAttach(msg: Parameters<Panel['processMessage']>[0]): void {
    super.onAfterAttach(msg);
    this.startLiveWidget();
  }

  private startLiveWidget(): void {
    const model = this.pendingWidgetModel;
    const registry = model && this.findRegistry ? this.findRegistry(this.node) : null;
    if (!model || !registry || this.live) {
      return;
    }
    this.pendingWidgetModel = null;
    let live: IRenderMime.IRenderer;
    try {
      live = registry.createRenderer(WIDGET_VIEW_MIME_TYPE);
    } catch {
      return; // no widget manager here: the static view stays
    }
    this.live = live;
    live.hide();
    this.addWidget(live);
    // The live view is ours too (the anywidget ESM): swap once it has drawn its root.
    this.observer = new MutationObserver(() => this.swapIfLive());
    this.observer.observe(live.node, { childList: true, subtree: true });
    void live.renderModel(model).then(() => this.swapIfLive(), () => undefined);
  }

  private swapIfLive(): void {
    if (this.live && this.live.node.querySelector('.jp-torchfuser-view')) {
      this.observer?.disconnect();
      this.observer = null;
      this.staticHolder.hide();
      this.live.show();
    }
  }

  dispose(): void {
    this.observer?.disconnect();
    this.staticView.dispose();
    super.dispose();
  }
}

export function createReportRendererFactory(findRegistry: RegistryFinder | null): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [REPORT_MIME_TYPE],
    defaultRank: REPORT_RENDERER_RANK,
    createRenderer: () => new ReportRenderer(findRegistry)
  };
}
