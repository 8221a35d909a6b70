/**
 * The JupyterLab host: a MIME renderer for application/vnd.torchfuser.report+json.
 *
 * It ranks ahead of the ipywidgets renderer on purpose. The explorer's output
 * carries both the widget view and the report; with no kernel (a saved
 * notebook reopened later) the widget cannot render. So this renderer asks
 * the notebook's widget manager for the live widget and shows it once it has
 * drawn itself; if it reports an error, or has not drawn within a short
 * grace period, the static view from the report is drawn instead.
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

/** How long the live widget gets to draw before the static view is drawn anyway. */
const LIVE_WIDGET_GRACE_MS = 2500;

export class ReportRenderer extends Panel implements IRenderMime.IRenderer {
  private readonly staticHolder = new Widget();
  private readonly staticView = new ExplorerView({ interactive: false });
  private live: IRenderMime.IRenderer | null = null;
  private liveShown = false;
  private pendingWidgetModel: IRenderMime.IMimeModel | null = null;
  private observer: MutationObserver | null = null;
  private graceTimer: ReturnType<typeof setTimeout> | null = null;
  private latestBundle: unknown = null;
  private drawnBundle: unknown = null;

  constructor(private readonly findRegistry: RegistryFinder | null) {
    super();
    this.addClass('jp-torchfuser-renderer');
    this.staticHolder.node.appendChild(this.staticView.node);
    this.addWidget(this.staticHolder);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.latestBundle = model.data[REPORT_MIME_TYPE];
    if (this.liveShown) {
      return; // the live widget follows its own model
    }
    const wantsLive = Boolean(model.data[WIDGET_VIEW_MIME_TYPE]) && this.findRegistry !== null && !this.live;
    if (!wantsLive) {
      return this.drawStatic();
    }
    // Give the live widget a moment first, so a big graph is not laid out twice.
    this.pendingWidgetModel = model;
    if (this.isAttached) {
      this.startLiveWidget();
    }
    this.graceTimer = setTimeout(() => void this.drawStatic(), LIVE_WIDGET_GRACE_MS);
  }

  protected onAfterAttach(msg: Parameters<Panel['processMessage']>[0]): void {
    super.onAfterAttach(msg);
    this.startLiveWidget();
  }

  private async drawStatic(): Promise<void> {
    if (this.liveShown || this.drawnBundle === this.latestBundle) {
      return this.staticView.whenDrawn();
    }
    this.drawnBundle = this.latestBundle;
    this.staticView.setBundle(this.latestBundle);
    return this.staticView.whenDrawn();
  }

  private startLiveWidget(): void {
    const model = this.pendingWidgetModel;
    if (!model || this.live) {
      return;
    }
    const registry = this.findRegistry?.(this.node) ?? null;
    let live: IRenderMime.IRenderer | null = null;
    try {
      live = registry ? registry.createRenderer(WIDGET_VIEW_MIME_TYPE) : null;
    } catch {
      live = null; // no widget manager in this document
    }
    this.pendingWidgetModel = null;
    if (!live) {
      void this.drawStatic();
      return;
    }
    this.live = live;
    live.hide();
    this.addWidget(live);
    // The live view is ours too (the anywidget ESM): swap once it has drawn its root.
    this.observer = new MutationObserver(() => this.checkLive());
    this.observer.observe(live.node, { childList: true, subtree: true, characterData: true });
    void live.renderModel(model).then(
      () => this.checkLive(),
      () => void this.drawStatic()
    );
  }

  private checkLive(): void {
    const live = this.live;
    if (!live || this.liveShown) {
      return;
    }
    if (live.node.querySelector('.jp-torchfuser-view')) {
      this.liveShown = true;
      this.observer?.disconnect();
      this.observer = null;
      if (this.graceTimer) {
        clearTimeout(this.graceTimer);
      }
      this.staticHolder.hide();
      live.show();
    } else if (/Error displaying widget/.test(live.node.textContent ?? '')) {
      // Saved notebook, new or no kernel: the widget model is gone, the report is not.
      void this.drawStatic();
    }
  }

  dispose(): void {
    if (this.graceTimer) {
      clearTimeout(this.graceTimer);
    }
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
