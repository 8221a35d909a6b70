/**
 * Lookup tables over one GRAPH, and the rule that pairs nodes across the
 * before/after graphs of a pass: same node id, same fused group, or a kernel
 * node and the nodes its kernel covers.
 */
import type { Graph, GraphNode, Kernel } from './schema';

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

function pushTo<K>(map: Map<K, string[]>, key: K, value: string): void {
  const list = map.get(key);
  if (list) {
    list.push(value);
  } else {
    map.set(key, [value]);
  }
}

/** Maps a covered node id to the kernels that cover it (kernel.nodes). */
export function coveringKernels(kernels: Kernel[]): Map<string, string[]> {
  const result = new Map<string, string[]>();
  for (const kernel of kernels) {
    for (const id of kernel.nodes ?? []) {
      pushTo(result, id, kernel.name);
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
    const kernel = kernels.find(k => k.name === node.kernel);
    for (const id of kernel?.nodes ?? []) {
      if (to.has(id)) {
        result.add(id);
      }
    }
  }
  // ...and a covered node pairs with its kernel node.
  for (const kernelName of coveringKernels(kernels).get(nodeId) ?? []) {
    for (const id of to.byKernel.get(kernelName) ?? []) {
      result.add(id);
    }
  }
  return result;
}
