/**
 * Which drawn nodes stand for kernels in one pane: for highlighting a kernel
 * (or a user line's kernels), and for painting the nodes a kernel covers in
 * graphs recorded before fusion.
 */
import { toDisplayed, type DisplayGraph } from './collapse';
import { kernelNodeIds, type GraphIndex } from './graph_index';
import type { Kernel } from './schema';

/** The displayed nodes for `kernels`: their kernel nodes, else (before fusion) the nodes they cover. */
export function kernelNodesIn(index: GraphIndex | null, display: DisplayGraph | null, kernels: Kernel[]): Set<string> {
  const raw = new Set<string>();
  if (!index || !display) {
    return raw;
  }
  for (const kernel of kernels) {
    const drawn = kernelNodeIds(index, kernel);
    for (const id of drawn.length ? drawn : (kernel.nodes ?? []).filter(id => index.has(id))) {
      raw.add(id);
    }
  }
  return toDisplayed(raw, display);
}

/**
 * Graphs recorded before fusion (the ATen graph) may carry no group colours:
 * the nodes each kernel covers, drawn as themselves, with that kernel's colour,
 * so fused groups match on both sides.
 */
export function coveredNodeColors(
  index: GraphIndex,
  display: DisplayGraph,
  kernels: Kernel[],
  colors: Map<string, string>
): [string, string][] {
  const result: [string, string][] = [];
  for (const kernel of kernels) {
    const color = colors.get(kernel.name);
    if (!color) {
      continue;
    }
    for (const id of kernel.nodes ?? []) {
      const node = index.byId.get(id);
      const uncoloured = node && (node.group === null || node.group === undefined) && !node.kernel;
      if (uncoloured && display.representative.get(id) === id) {
        result.push([id, color]);
      }
    }
  }
  return result;
}
