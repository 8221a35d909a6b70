/**
 * Lookup tables over one GRAPH, and the rule that pairs nodes across the
 * before/after graphs of a pass: same node id, same fused group, or a kernel
 * node and the nodes its kernel covers.
 */
import { graphFillColors } from './graph_dot';
import type { Graph, GraphNode, Kernel, Report } from './schema';

export class GraphIndex {
  readonly byId = new Map<string, GraphNode>();
  readonly byGroup = new Map<number, string[]>();
  readonly byKernel = new Map<string, string[]>();

  constructor(readonly graph: Graph) {
    for (const node of graph.nodes) {
      this.byId.set(node.id, node);
      if (node.group !== null && node.group !== undefined) {
        pushTo(this.byGroup, node.group, node.id);
      }
      if (node.kernel) {
        pushTo(this.byKernel, node.kernel, node.id);
      }
    }
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }
}

const indexCache = new WeakMap<Graph, GraphIndex>();

/** The index of a graph, built once (graphs do not change after decoding). */
export function indexOf(graph: Graph): GraphIndex {
  let index = indexCache.get(graph);
  if (!index) {
    index = new GraphIndex(graph);
    indexCache.set(graph, index);
  }
  return index;
}

function pushTo<K>(map: Map<K, string[]>, key: K, value: string): void {
  const list = map.get(key);
  if (list) {
    list.push(value);
  } else {
    map.set(key, [value]);
  }
}

/**
 * The kernel record behind a kernel node: by name, else by fused group (the
 * name on the node can be a placeholder given before codegen named the kernel).
 */
export function kernelForNode(node: GraphNode | undefined, kernels: Kernel[]): Kernel | undefined {
  if (!node?.kernel) {
    return undefined;
  }
  return (
    kernels.find(k => k.name === node.kernel) ??
    (node.group === null || node.group === undefined ? undefined : kernels.find(k => k.group === node.group))
  );
}

/** Ids of the kernel nodes in `index` that stand for `kernel`. */
export function kernelNodeIds(index: GraphIndex, kernel: Kernel): string[] {
  const byName = index.byKernel.get(kernel.name);
  if (byName?.length) {
    return byName;
  }
  if (kernel.group === null || kernel.group === undefined) {
    return [];
  }
  return (index.byGroup.get(kernel.group) ?? []).filter(id => index.byId.get(id)?.kernel);
}

/** Maps a covered node id to the kernels that cover it (kernel.nodes). */
export function coveringKernels(kernels: Kernel[]): Map<string, Kernel[]> {
  const result = new Map<string, Kernel[]>();
  for (const kernel of kernels) {
    for (const id of kernel.nodes ?? []) {
      const list = result.get(id);
      if (list) {
        list.push(kernel);
      } else {
        result.set(id, [kernel]);
      }
    }
  }
  return result;
}

/**
 * Ids in `to` that correspond to node `nodeId` of `from`. Works in both
 * directions, so the caller only says which side is which.
 */
export function findCounterparts(
  nodeId: string,
  from: GraphIndex,
  to: GraphIndex,
  kernels: Kernel[]
): Set<string> {
  const result = new Set<string>();
  const node = from.byId.get(nodeId);
  if (!node) {
    return result;
  }
  if (to.has(nodeId)) {
    result.add(nodeId);
  }
  if (node.group !== null && node.group !== undefined) {
    for (const id of to.byGroup.get(node.group) ?? []) {
      result.add(id);
    }
  }
  // A kernel node pairs with the nodes it covers...
  if (node.kernel) {
    const kernel = kernelForNode(node, kernels);
    for (const id of kernel?.nodes ?? []) {
      if (to.has(id)) {
        result.add(id);
      }
    }
  }
  // ...and a covered node pairs with its kernel node.
  for (const kernel of coveringKernels(kernels).get(nodeId) ?? []) {
    for (const id of kernelNodeIds(to, kernel)) {
      result.add(id);
    }
  }
  return result;
}

/** Fill colour of each kernel's node, as drawn (group colours; a stored DOT is read once per graph). */
export function kernelFillColors(report: Report): Map<string, string> {
  const colors = new Map<string, string>();
  const graphs = [...report.passes.map(p => p.graph_after), report.graphs.aten].filter((g): g is Graph => !!g);
  for (const graph of graphs) {
    if (!graph.nodes.some(n => n.kernel)) {
      continue;
    }
    const fills = graphFillColors(graph);
    for (const node of graph.nodes) {
      const fill = fills.get(node.id);
      const name = kernelForNode(node, report.kernels)?.name;
      if (name && fill && !colors.has(name)) {
        colors.set(name, fill);
      }
    }
  }
  return colors;
}
