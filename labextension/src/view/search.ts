/**
 * Search by op or module name. Every whitespace-separated term must occur
 * (case-insensitively) in one of the node's names: id, label, op, target,
 * module path, module type or kernel name.
 */
import type { Graph, GraphNode } from './schema';

function searchableText(node: GraphNode): string {
  return [node.id, node.label, node.op, node.target, node.module, node.module_type, node.kernel]
    .filter(part => typeof part === 'string' && part.length > 0)
    .join('\n')
    .toLowerCase();
}

export function parseQuery(query: string): string[] {
  return query
    .toLowerCase()
    .split(/\s+/)
    .filter(term => term.length > 0);
}

/** Ids of matching nodes; an empty query matches nothing (no filter). */
export function matchNodes(graph: Graph | null, query: string): Set<string> {
  const terms = parseQuery(query);
  const result = new Set<string>();
  if (!graph || terms.length === 0) {
    return result;
  }
  for (const node of graph.nodes) {
    const text = searchableText(node);
    if (terms.every(term => text.includes(term))) {
      result.add(node.id);
    }
  }
  return result;
}
