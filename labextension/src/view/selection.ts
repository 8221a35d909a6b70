/**
 * What the view has selected, one thing at a time: a kernel (and then maybe
 * one of its OpenCL lines), or a user line's kernels; and the drawn nodes
 * that show it in one pane.
 */
import type { DisplayGraph } from './collapse';
import type { GraphIndex } from './graph_index';
import { kernelNodesIn } from './kernel_marks';
import type { Kernel } from './schema';
import { lineNodesIn, type SourceLineChoice } from './source_lines';

export class Selection {
  /** The kernel whose source is shown. */
  kernel: string | null = null;
  /** The kernels of the user line chosen in the list. */
  lineKernels: string[] = [];
  /** The shown kernel's OpenCL line chosen in the source pane. */
  sourceLine: SourceLineChoice | null = null;

  set(kernel: string | null, lineKernels: string[] = [], sourceLine: SourceLineChoice | null = null): void {
    this.kernel = kernel;
    this.lineKernels = lineKernels;
    this.sourceLine = sourceLine;
  }

  /**
   * In one pane: the selected kernel's nodes, and the highlighted ones (a user
   * line's kernels, or the nodes of the chosen OpenCL line; never both).
   */
  nodesIn(index: GraphIndex | null, display: DisplayGraph | null, kernels: Kernel[]): { selected: Set<string>; highlighted: Set<string> } {
    const selected = kernelNodesIn(index, display, kernels.filter(k => k.name === this.kernel));
    const highlighted = this.sourceLine
      ? lineNodesIn(index, display, this.sourceLine)
      : kernelNodesIn(index, display, kernels.filter(k => this.lineKernels.includes(k.name)));
    return { selected, highlighted };
  }
}
