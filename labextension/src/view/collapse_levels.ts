/**
 * How much of a big graph to collapse: the level a graph is first shown at
 * (chosen by size, so a 5,000-node graph opens as a drawing of ~100 boxes),
 * what "collapse to level n" collapses, and what expanding a module leaves
 * collapsed.
 */
import { memberPaths, moduleEntries, pathGroups, type ModuleEntry } from './collapse';
import type { Graph } from './schema';

/** About this many boxes lay out in well under a second and stay readable. */
export const BOX_BUDGET = 150;

const parentsCache = new WeakMap<Graph, Set<string>>();

/** Module paths that contain other modules. */
function parentPaths(graph: Graph): Set<string> {
  let parents = parentsCache.get(graph);
  if (!parents) {
    parents = new Set();
    for (const entry of moduleEntries(graph)) {
      const cut = entry.path.lastIndexOf('.');
      if (cut > 0) {
        parents.add(entry.path.slice(0, cut));
      }
    }
    parentsCache.set(graph, parents);
  }
  return parents;
}

/**
 * What "collapse to level `depth`" collapses: every module at that depth, and
 * the shallower modules with no modules inside (an embedding, a final norm),
 * which would otherwise stay spread out beside the collapsed ones.
 */
export function collapsedAtDepth(graph: Graph | null, depth: number): string[] {
  if (!graph) {
    return [];
  }
  const parents = parentPaths(graph);
  return moduleEntries(graph)
    .filter(entry => entry.depth === depth || (entry.depth < depth && !parents.has(entry.path)))
    .map(entry => entry.path);
}

/** Boxes drawn when collapsed to level `depth` (see collapsedAtDepth); counted per module path, not per node. */
export function boxesAtDepth(graph: Graph, depth: number): number {
  const parents = parentPaths(graph);
  const groups = pathGroups(graph);
  let boxes = graph.nodes.length - memberPaths(graph).size; // nodes outside every module are drawn themselves
  const moduleBoxes = new Set<string>();
  for (const [path, ids] of groups) {
    const parts = path.split('.');
    if (parts.length > depth) {
      moduleBoxes.add(parts.slice(0, depth + 1).join('.'));
    } else if (!parents.has(path)) {
      moduleBoxes.add(path);
    } else {
      boxes += ids.length; // a parent module's own nodes, drawn beside its collapsed children
    }
  }
  return boxes + moduleBoxes.size;
}

/**
 * The depth to collapse a big graph to when it is first shown: the deepest
 * module depth whose drawing stays within `budget` boxes on every graph, else
 * the top level. null when every graph fits whole (or has no modules).
 */
export function initialCollapseDepth(graphs: (Graph | null)[], budget = BOX_BUDGET): number | null {
  const present = graphs.filter((graph): graph is Graph => graph !== null);
  if (present.every(graph => graph.nodes.length <= budget)) {
    return null;
  }
  const maxDepth = Math.max(-1, ...present.flatMap(graph => moduleEntries(graph).map(entry => entry.depth)));
  if (maxDepth < 0) {
    return null;
  }
  // Deeper levels only split boxes, so the count grows with depth: stop at the first one over budget.
  let chosen = 0;
  for (let depth = 1; depth <= maxDepth; depth++) {
    if (!present.every(graph => boxesAtDepth(graph, depth) <= budget)) {
      break;
    }
    chosen = depth;
  }
  return chosen;
}

/** The modules directly inside `path`. */
export function childModules(entries: ModuleEntry[], path: string): string[] {
  const depth = path.split('.').length;
  return entries.filter(entry => entry.depth === depth && entry.path.startsWith(path + '.')).map(entry => entry.path);
}

/** What "collapse to level `depth`" collapses on any of the graphs (both sides of a pass). */
export function collapsedAtDepthIn(graphs: (Graph | null)[], depth: number): string[] {
  return [...new Set(graphs.flatMap(graph => collapsedAtDepth(graph, depth)))];
}

/** The collapsed set after expanding `path`: one too big to draw whole leaves its child modules collapsed. */
export function afterExpanding(collapsed: Iterable<string>, path: string, graphs: (Graph | null)[], budget = BOX_BUDGET): string[] {
  const remaining = [...collapsed].filter(p => p !== path && !p.startsWith(path + '.'));
  const size = Math.max(0, ...graphs.map(graph => moduleEntries(graph).find(entry => entry.path === path)?.nodeIds.length ?? 0));
  const children = size > budget ? graphs.flatMap(graph => childModules(moduleEntries(graph), path)) : [];
  return [...new Set([...remaining, ...children])];
}
