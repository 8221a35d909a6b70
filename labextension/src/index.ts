/**
 * JupyterLab entry point: registers the TorchFuser report renderer. The
 * notebook tracker is optional; it lets the renderer find the notebook's
 * widget manager and hand over to the live widget when a kernel is running.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { createReportRendererFactory, REPORT_RENDERER_RANK, type RegistryFinder } from './lab_renderer';

export { REPORT_MIME_TYPE } from './view/schema';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'torchfuser-labextension:report-renderer',
  description: 'Shows TorchFuser compile reports (graphs per pass, OpenCL kernels, timings).',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, rendermime: IRenderMimeRegistry, tracker: INotebookTracker | null) => {
    const findRegistry: RegistryFinder | null = tracker
      ? node => tracker.find(panel => panel.node.contains(node))?.content.rendermime ?? null
      : null;
    rendermime.addFactory(createReportRendererFactory(findRegistry), REPORT_RENDERER_RANK);
  }
};

export default plugin;
