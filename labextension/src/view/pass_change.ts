/**
 * What a pass changed: node ids removed, added, and rewritten (kept but
 * changed, or moved out of order). Schema v2 stores this per pass; for v1,
 * which stored both graphs whole, it is derived here by the same rule the
 * compiler uses to write v2 (torchfuser/report/wire.py encode_change), so
 * both versions of one report mark the same nodes.
 */
import type { DisplayGraph } from './collapse';
import type { Graph, GraphNode, PassChange, PassRecord } from './schema';

export const NO_CHANGE: PassChange = { removed: [], added: [], rewritten: [] };

/** Positions of one longest strictly increasing subsequence of `values` (patience sorting). */
export function longestIncreasing(values: number[]): Set<number> {
  const tailValues: number[] = [];
  const tailPositions: number[] = [];
  const previous = new Array<number>(values.length).fill(-1);
  values.forEach((value, position) => {
    let lo = 0;
    let hi = tailValues.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (tailValues[mid] < value) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo > 0) {
      previous[position] = tailPositions[lo - 1];
    }
    tailValues[lo] = value;
    tailPositions[lo] = position;
  });
  const result = new Set<number>();
  let position = tailPositions.length ? tailPositions[tailPositions.length - 1] : -1;
  while (position >= 0) {
    result.add(position);
    position = previous[position];
  }
  return result;
}

const COMPARED_FIELDS: (keyof GraphNode)[] = [
  'op', 'target', 'label', 'shape', 'dtype', 'group', 'kernel', 'module', 'module_type', 'file', 'line', 'code'
];

function inputsOf(graph: Graph): Map<string, string[]> {
  const inputs = new Map<string, string[]>();
  for (const [from, to] of graph.edges) {
    const list = inputs.get(to);
    if (list) {
      list.push(from);
    } else {
      inputs.set(to, [from]);
    }
  }
  return inputs;
}

function sameNode(a: GraphNode, b: GraphNode, inputsA: string[], inputsB: string[]): boolean {
  return (
    COMPARED_FIELDS.every(field => JSON.stringify(a[field] ?? null) === JSON.stringify(b[field] ?? null)) &&
    JSON.stringify(inputsA) === JSON.stringify(inputsB)
  );
}

/** The change from `before` to `after`: what the compiler would have stored as v2. */
export function diffGraphs(before: Graph, after: Graph): PassChange {
  const old = new Map(before.nodes.map((node, index) => [node.id, { index, node }]));
  const afterIds = new Set(after.nodes.map(n => n.id));
  const kept = after.nodes.filter(n => old.has(n.id));
  const inOrder = longestIncreasing(kept.map(n => old.get(n.id)!.index));
  const inputsBefore = inputsOf(before);
  const inputsAfter = inputsOf(after);
  const rewritten = new Set<string>();
  kept.forEach((node, position) => {
    const was = old.get(node.id)!.node;
    if (!inOrder.has(position) || !sameNode(node, was, inputsAfter.get(node.id) ?? [], inputsBefore.get(node.id) ?? [])) {
      rewritten.add(node.id);
    }
  });
  return {
    removed: before.nodes.filter(n => !afterIds.has(n.id)).map(n => n.id),
    added: after.nodes.filter(n => !old.has(n.id)).map(n => n.id),
    // In the order of the graph after, as v2 lists them.
    rewritten: after.nodes.filter(n => rewritten.has(n.id)).map(n => n.id)
  };
}

/** A v2 wire Change → ids (malformed entries skipped: the graphs were already checked when decoded). */
export function changeFromWire(change: unknown): PassChange | null {
  if (typeof change !== 'object' || change === null) {
    return null;
  }
  const wire = change as { removed?: unknown; added?: unknown; rewritten?: unknown };
  const ids = (placed: unknown) =>
    (Array.isArray(placed) ? placed : [])
      .map(entry => (Array.isArray(entry) ? (entry[1] as { id?: unknown } | undefined)?.id : undefined))
      .filter((id): id is string => typeof id === 'string');
  return {
    removed: (Array.isArray(wire.removed) ? wire.removed : []).filter((id): id is string => typeof id === 'string'),
    added: ids(wire.added),
    rewritten: ids(wire.rewritten)
  };
}

/** The pass's change: stored (v2), else derived from its graphs (v1), else null (the pass did not run). */
export function passChange(record: PassRecord | undefined): PassChange | null {
  if (!record) {
    return null;
  }
  if (record.change === undefined && record.graph_before && record.graph_after) {
    record.change = diffGraphs(record.graph_before, record.graph_after); // kept: a graph's diff is asked for often
  }
  return record.change ?? null;
}

export function changedNothing(change: PassChange | null): boolean {
  return !change || (change.removed.length === 0 && change.added.length === 0 && change.rewritten.length === 0);
}

/** How each pane marks the change: removed and rewritten before the pass, added and rewritten after it. */
export function changeMarks(change: PassChange | null): { before: Map<string, string>; after: Map<string, string> } {
  const before = new Map<string, string>();
  const after = new Map<string, string>();
  for (const id of change?.removed ?? []) {
    before.set(id, 'removed');
  }
  for (const id of change?.rewritten ?? []) {
    before.set(id, 'rewritten');
    after.set(id, 'rewritten');
  }
  for (const id of change?.added ?? []) {
    after.set(id, 'added');
  }
  return { before, after };
}

/** A drawn node's mark: its own change, or for a collapsed module box, what changed inside it. */
export interface DrawnMark {
  change: string;
  /** Set on module boxes only: how many nodes inside changed. */
  inside?: number;
  /** Set on module boxes only: the box's tooltip line, e.g. "3 nodes removed inside". */
  title?: string;
}

function insideTitle(kinds: Map<string, number>, count: number): string {
  const nodes = `${count} node${count === 1 ? '' : 's'}`;
  if (kinds.size === 1) {
    return `${nodes} ${[...kinds.keys()][0]} inside`;
  }
  return `${nodes} changed inside: ${[...kinds].map(([kind, n]) => `${n} ${kind}`).join(', ')}`;
}

/**
 * Marks by drawn id. A changed node hidden in a collapsed module box marks the
 * box instead, so on a big graph the change is not invisible: the box takes
 * the one kind its changed nodes share, or "mixed".
 */
export function drawnMarks(marks: Map<string, string>, display: DisplayGraph | null): Map<string, DrawnMark> {
  const drawn = new Map<string, DrawnMark>();
  const boxes = new Map<string, Map<string, number>>();
  for (const [id, change] of marks) {
    const shown = display?.representative.get(id) ?? id;
    if (shown === id) {
      drawn.set(id, { change });
      continue;
    }
    const kinds = boxes.get(shown) ?? new Map<string, number>();
    kinds.set(change, (kinds.get(change) ?? 0) + 1);
    boxes.set(shown, kinds);
  }
  for (const [box, kinds] of boxes) {
    let count = 0;
    kinds.forEach(n => (count += n));
    const change = kinds.size === 1 ? [...kinds.keys()][0] : 'mixed';
    drawn.set(box, { change, inside: count, title: insideTitle(kinds, count) });
  }
  return drawn;
}
