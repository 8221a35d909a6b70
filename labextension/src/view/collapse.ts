/**
 * Collapse and expand by module. A collapsed module becomes one box in the
 * drawn graph; edges are rerouted to it. With nothing collapsed, the
 * compiler's own DOT is drawn unchanged.
 */
import { dotQuote, tunedForSize } from './dot_text';
import { formatLocation, formatShape } from './format';
import { graphFillColors } from './graph_dot';
import type { Graph, GraphNode } from './schema';

export const MODULE_NODE_PREFIX = 'module:';
export const KERNEL_CLASS = 'jp-torchfuser-kernel';
export const MODULE_CLASS = 'jp-torchfuser-module';

export interface ModuleEntry {
  path: string;
  depth: number;
  moduleType: string;
  nodeIds: string[];
}

export interface DisplayGraph {
  dot: string;
  /** raw node id → id drawn in the SVG (itself, or its collapsed module's box) */
  representative: Map<string, string>;
  /** drawn module box id → raw node ids inside it */
  members: Map<string, string[]>;
}

function ancestorsOf(path: string): string[] {
  const parts = path.split('.');
  return parts.map((_, i) => parts.slice(0, i + 1).join('.'));
}

function commonAncestor(a: string, b: string): string {
  if (!a || !b) {
    return '';
  }
  const left = a.split('.');
  const right = b.split('.');
  let shared = 0;
  while (shared < left.length && shared < right.length && left[shared] === right[shared]) {
    shared++;
  }
  return left.slice(0, shared).join('.');
}

const pathsCache = new WeakMap<Graph, Map<string, string>>();

/**
 * node id → the module path it is collapsed with. In an ATen graph every
 * parameter and input is a top-level placeholder (hundreds in a big model);
 * one read only inside one module (the nearest common one of its readers)
 * goes with that module, so a collapsed drawing is not a field of loose inputs.
 */
export function memberPaths(graph: Graph): Map<string, string> {
  let paths = pathsCache.get(graph);
  if (paths) {
    return paths;
  }
  paths = new Map();
  const loose = new Set<string>();
  const moduleOf = new Map<string, string>();
  for (const node of graph.nodes) {
    moduleOf.set(node.id, node.module ?? '');
    if (node.module) {
      paths.set(node.id, node.module);
    } else if (node.op === 'placeholder' || node.op === 'get_attr') {
      loose.add(node.id);
    }
  }
  if (loose.size) {
    const readers = new Map<string, string>();
    for (const [from, to] of graph.edges) {
      if (loose.has(from)) {
        const path = moduleOf.get(to) ?? '';
        const previous = readers.get(from);
        readers.set(from, previous === undefined ? path : commonAncestor(previous, path));
      }
    }
    for (const [id, path] of readers) {
      if (path) {
        paths.set(id, path);
      }
    }
  }
  pathsCache.set(graph, paths);
  return paths;
}

const entriesCache = new WeakMap<Graph, ModuleEntry[]>();

/** Every module path in the graph, ancestors included, with the nodes inside it (computed once per graph). */
export function moduleEntries(graph: Graph | null): ModuleEntry[] {
  if (!graph) {
    return [];
  }
  let entries = entriesCache.get(graph);
  if (!entries) {
    entries = collectModuleEntries(graph);
    entriesCache.set(graph, entries);
  }
  return entries;
}

const groupsCache = new WeakMap<Graph, Map<string, string[]>>();

/** module path → the ids collapsed with it directly (memberPaths grouped by path). */
export function pathGroups(graph: Graph): Map<string, string[]> {
  let groups = groupsCache.get(graph);
  if (!groups) {
    groups = new Map();
    for (const [id, path] of memberPaths(graph)) {
      const ids = groups.get(path);
      if (ids) {
        ids.push(id);
      } else {
        groups.set(path, [id]);
      }
    }
    groupsCache.set(graph, groups);
  }
  return groups;
}

function collectModuleEntries(graph: Graph): ModuleEntry[] {
  const members = new Map<string, string[]>();
  const add = (modulePath: string, ids: string[]) => {
    // Ancestors are worked out once per module path, not once per node.
    for (const path of ancestorsOf(modulePath)) {
      const list = members.get(path);
      if (list) {
        list.push(...ids);
      } else {
        members.set(path, [...ids]);
      }
    }
  };
  for (const [path, ids] of pathGroups(graph)) {
    add(path, ids);
  }
  // A stored graph's module lists may name nodes their own field does not; a derived graph's are built from it.
  for (const [path, ids] of graph.derived ? [] : Object.entries(graph.modules)) {
    if (path && Array.isArray(ids)) {
      add(path, ids);
    }
  }
  const types = new Map<string, string>();
  for (const node of graph.nodes) {
    if (node.module && node.module_type && !types.has(node.module)) {
      types.set(node.module, node.module_type);
    }
  }
  return [...members.entries()]
    .map(([path, ids]) => ({
      path,
      depth: path.split('.').length - 1,
      moduleType: types.get(path) ?? '',
      nodeIds: graph.derived ? ids : [...new Set(ids)] // each node is in one path group, except via stored lists
    }))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** The outermost collapsed module that contains each node. */
function representatives(graph: Graph, collapsed: Set<string>): Map<string, string> {
  const entries = moduleEntries(graph).filter(entry => collapsed.has(entry.path));
  // Outermost first, so a collapsed parent wins over a collapsed child.
  entries.sort((a, b) => a.depth - b.depth);
  const representative = new Map<string, string>();
  for (const node of graph.nodes) {
    representative.set(node.id, node.id);
  }
  const assigned = new Set<string>();
  for (const entry of entries) {
    for (const id of entry.nodeIds) {
      if (!assigned.has(id) && representative.has(id)) {
        representative.set(id, MODULE_NODE_PREFIX + entry.path);
        assigned.add(id);
      }
    }
  }
  return representative;
}

const GROUP_PALETTE = ['#8dd3c7', '#ffffb3', '#bebada', '#fb8072', '#80b1d3', '#fdb462', '#b3de69', '#fccde5'];

function nodeTooltip(node: GraphNode): string {
  const lines = [formatShape(node.shape, node.dtype)];
  if (node.module) {
    lines.push(node.module_type ? `${node.module} (${node.module_type})` : node.module);
  }
  const where = formatLocation(node.file, node.line);
  if (where) {
    lines.push(node.code ? `${where}: ${node.code}` : where);
  }
  return lines.filter(Boolean).join('\n') || node.target || node.id;
}

function nodeStatement(node: GraphNode, fill: string | undefined): string {
  const attrs: [string, string][] = [
    ['id', node.id],
    ['label', node.label || node.id],
    ['tooltip', nodeTooltip(node)]
  ];
  const color = fill ?? (node.group !== null && node.group !== undefined
    ? GROUP_PALETTE[Math.abs(node.group) % GROUP_PALETTE.length]
    : undefined);
  if (color) {
    attrs.push(['fillcolor', color]);
  }
  if (node.kernel) {
    attrs.push(['class', KERNEL_CLASS], ['penwidth', '2']);
  }
  return `  ${dotQuote(node.id)} [${attrs.map(([k, v]) => `${k}=${dotQuote(v)}`).join(', ')}];`;
}

/** The stored DOT's direction; derived DOT is always top to bottom (and is not built just to ask). */
function rankdirOf(graph: Graph): string {
  if (graph.derived) {
    return 'TB';
  }
  const match = /rankdir\s*=\s*"?(TB|LR|BT|RL)"?/i.exec(graph.dot);
  return match ? match[1].toUpperCase() : 'TB';
}

/** DOT for the graph with the given modules collapsed (empty set: the compiler's DOT). */
export function buildDisplayGraph(graph: Graph, collapsed: Set<string>): DisplayGraph {
  const representative = representatives(graph, collapsed);
  const members = new Map<string, string[]>();
  for (const [id, rep] of representative) {
    if (rep !== id) {
      const list = members.get(rep) ?? [];
      list.push(id);
      members.set(rep, list);
    }
  }
  if (members.size === 0 && graph.dot) {
    return { dot: tunedForSize(graph.dot, graph.nodes.length), representative, members };
  }
  const fills = graphFillColors(graph);
  const lines = [
    'digraph G {',
    `  rankdir=${rankdirOf(graph)};`,
    '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica", fontsize=11];',
    '  edge [arrowsize=0.6];'
  ];
  for (const node of graph.nodes) {
    if (representative.get(node.id) === node.id) {
      lines.push(nodeStatement(node, fills.get(node.id)));
    }
  }
  const byId = new Map(graph.nodes.map(node => [node.id, node]));
  for (const [boxId, ids] of members) {
    const path = boxId.slice(MODULE_NODE_PREFIX.length);
    const moduleType = ids.map(id => byId.get(id)).find(n => n?.module === path && n.module_type)?.module_type ?? '';
    const label = `${path}${moduleType ? ` (${moduleType})` : ''}\n${ids.length} nodes · collapsed`;
    const attrs = [
      ['id', boxId],
      ['label', label],
      ['tooltip', `${path}: click to expand`],
      ['shape', 'box3d'],
      ['fillcolor', '#e0e0e0'],
      ['class', MODULE_CLASS]
    ];
    lines.push(`  ${dotQuote(boxId)} [${attrs.map(([k, v]) => `${k}=${dotQuote(v)}`).join(', ')}];`);
  }
  const seen = new Set<string>();
  for (const [from, to] of graph.edges) {
    const a = representative.get(from);
    const b = representative.get(to);
    if (a === undefined || b === undefined || a === b) {
      continue;
    }
    const key = `${a}\u0000${b}`;
    if (!seen.has(key)) {
      seen.add(key);
      lines.push(`  ${dotQuote(a)} -> ${dotQuote(b)};`);
    }
  }
  lines.push('}');
  return { dot: tunedForSize(lines.join('\n'), representative.size - drawnCount(members)), representative, members };
}

function drawnCount(members: Map<string, string[]>): number {
  let hidden = 0;
  for (const ids of members.values()) {
    hidden += ids.length - 1;
  }
  return hidden;
}

/** Drawn ids for raw ids (a node inside a collapsed module maps to the module box). */
export function toDisplayed(ids: Iterable<string>, display: DisplayGraph): Set<string> {
  const result = new Set<string>();
  for (const id of ids) {
    result.add(display.representative.get(id) ?? id);
  }
  return result;
}

/** Raw ids behind a drawn id. */
export function toRaw(displayedId: string, display: DisplayGraph): string[] {
  return display.members.get(displayedId) ?? [displayedId];
}

/** Module paths at one nesting depth (0: top level). */
export function modulesAtDepth(entries: ModuleEntry[], depth: number): string[] {
  return entries.filter(entry => entry.depth === depth).map(entry => entry.path);
}

/**
 * The nesting depths worth offering for "collapse to level": wrapper levels
 * with a single module (the model itself, a ModuleList) say little on their own.
 */
export function collapseLevels(entries: ModuleEntry[]): { depth: number; count: number; example: string }[] {
  const maxDepth = Math.max(-1, ...entries.map(entry => entry.depth));
  const levels: { depth: number; count: number; example: string }[] = [];
  for (let depth = 0; depth <= maxDepth; depth++) {
    const paths = modulesAtDepth(entries, depth);
    if (paths.length) {
      levels.push({ depth, count: paths.length, example: paths[0] });
    }
  }
  return levels;
}
