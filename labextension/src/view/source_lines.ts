/**
 * Provenance both ways (#16), from the OpenCL side: the kernel's source drawn
 * one element per line (.jp-torchfuser-source-line, data-line 1-based, and
 * data-nodes naming the graph nodes the line computes, from the report's
 * line_nodes), and what a chosen line stands for: its nodes as drawn in a
 * pane, and the user's lines those nodes came from.
 */
import { toDisplayed, type DisplayGraph } from './collapse';
import { el } from './dom';
import { kernelNodeIds, type GraphIndex } from './graph_index';
import { highlightOpenCLLines } from './opencl_highlight';
import type { Graph, Kernel, Report } from './schema';
import { lineKey } from './user_lines';

export const SOURCE_LINE_CLASS = 'jp-torchfuser-source-line';

/** The highlighted source, a block span per line; mapped lines are buttons naming their nodes. */
export function renderSourceLines(kernel: Kernel): HTMLElement[] {
  const lines = highlightOpenCLLines(kernel.source ?? '');
  return lines.map((fragment, i) => {
    const ids = kernel.line_nodes?.[String(i + 1)] ?? [];
    const mapped = ids.length > 0;
    return el(
      'span',
      {
        className: SOURCE_LINE_CLASS,
        attrs: {
          'data-line': i + 1,
          'data-nodes': mapped ? ids.join(' ') : null,
          role: mapped ? 'button' : null,
          tabindex: mapped ? 0 : null,
          title: mapped ? `computes ${ids.join(', ')}` : null
        }
      },
      // The newline stays in the text, so copying the code keeps its lines.
      [fragment, i < lines.length - 1 ? '\n' : null]
    );
  });
}

/** The node ids a rendered line names (none for an unmapped line). */
export function nodesOfLine(line: Element): string[] {
  return (line.getAttribute('data-nodes') ?? '').split(' ').filter(Boolean);
}

/** A chosen source line: the kernel it belongs to and the node ids it computes. */
export interface SourceLineChoice {
  kernel: Kernel;
  ids: string[];
}

/**
 * The drawn nodes for a chosen line in one pane: its nodes (through the
 * collapse display); where none of them is in this graph (after fusion), the
 * kernel's fused node instead.
 */
export function lineNodesIn(index: GraphIndex | null, display: DisplayGraph | null, choice: SourceLineChoice | null): Set<string> {
  if (!index || !display || !choice) {
    return new Set();
  }
  const own = choice.ids.filter(id => index.has(id));
  if (own.length) {
    return toDisplayed(own, display);
  }
  const fused = choice.kernel.node && index.has(choice.kernel.node) ? [choice.kernel.node] : kernelNodeIds(index, choice.kernel);
  return toDisplayed(fused, display);
}

/** Every graph of the report, where the line's node ids may be found (the ATen graph first). */
function reportGraphs(report: Report): Graph[] {
  const graphs = [report.graphs.aten, ...report.passes.flatMap(p => [p.graph_before, p.graph_after]), report.graphs.captured];
  return graphs.filter((g): g is Graph => !!g);
}

/** The keys (user_lines.ts lineKey) of the user's lines that the chosen line's nodes came from. */
export function userLineKeysOf(report: Report | null, choice: SourceLineChoice | null): Set<string> {
  const keys = new Set<string>();
  const wanted = new Set(choice?.ids ?? []);
  for (const graph of report && wanted.size ? reportGraphs(report) : []) {
    for (const node of graph.nodes) {
      if (wanted.delete(node.id) && (node.file || node.code)) {
        keys.add(lineKey(node.file, node.line, node.code));
      }
    }
    if (!wanted.size) {
      break;
    }
  }
  return keys;
}

