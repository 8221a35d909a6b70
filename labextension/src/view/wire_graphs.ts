/**
 * Schema v2 graphs → the view's full graphs. v2 stores the ATen graph once
 * and each pass as its change to the graph before it; this replays the chain
 * (report.schema.json, Change) and resolves interned module paths and source
 * lines. Nodes are resolved when the report is decoded (so malformed input
 * fails there, with a message); edges, module lists and DOT are derived only
 * when a graph is first drawn, then kept on the graph.
 */
import type { WireChange, WireFusedInto, WireLocation, WireModule, WireNode } from '../generated/report_types';
import { graphDot } from './graph_dot';
import type { Graph, GraphNode, SourceLine } from './schema';

export class MalformedReport extends Error {}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Resolves a report's interned module paths ([path, type]) and source lines ([file, line, code]). */
export class Provenance {
  private readonly resolved = new WeakMap<WireNode, GraphNode>();

  constructor(
    private readonly modules: WireModule[],
    private readonly locations: WireLocation[]
  ) {}

  /** An unknown index reads as top level / unknown source rather than failing the whole report. */
  fields(module: unknown, location: unknown): SourceLine {
    const entry = typeof module === 'number' ? this.modules[module] : undefined;
    const where = typeof location === 'number' ? this.locations[location] : undefined;
    return {
      module: Array.isArray(entry) && typeof entry[0] === 'string' ? entry[0] : '',
      module_type: Array.isArray(entry) && typeof entry[1] === 'string' ? entry[1] : '',
      file: Array.isArray(where) ? stringOrNull(where[0]) : null,
      line: Array.isArray(where) ? numberOrNull(where[1]) : null,
      code: Array.isArray(where) ? stringOrNull(where[2]) : null
    };
  }

  /** The view's node for a wire node (the same object each time it is asked). */
  node(wire: WireNode): GraphNode {
    let node = this.resolved.get(wire);
    if (!node) {
      node = {
        id: wire.id,
        op: String(wire.op ?? ''),
        target: String(wire.target ?? ''),
        label: String(wire.label ?? wire.id),
        shape: Array.isArray(wire.shape) ? wire.shape : null,
        dtype: stringOrNull(wire.dtype),
        group: numberOrNull(wire.group),
        kernel: stringOrNull(wire.kernel),
        ...this.fields(wire.module, wire.location)
      };
      this.resolved.set(wire, node);
    }
    return node;
  }
}

/** Checks one graph's node list: objects with a string id, unique, inputs a list of strings. */
export function checkedNodes(value: unknown, where: string): WireNode[] {
  if (!Array.isArray(value)) {
    throw new MalformedReport(`${where}: nodes is not a list`);
  }
  for (const node of value) {
    if (!isObject(node) || typeof node.id !== 'string') {
      throw new MalformedReport(`${where}: a node without a string id`);
    }
    if (node.inputs !== undefined && !(Array.isArray(node.inputs) && node.inputs.every(i => typeof i === 'string'))) {
      throw new MalformedReport(`${where}: node ${node.id} has inputs that are not a list of ids`);
    }
  }
  return value as WireNode[];
}

function checkedPlaced(value: unknown, where: string): [number, WireNode][] {
  if (!Array.isArray(value)) {
    throw new MalformedReport(`${where} is not a list`);
  }
  for (const placed of value) {
    if (!Array.isArray(placed) || placed.length < 2) {
      throw new MalformedReport(`${where}: an entry is not [index, node]`);
    }
  }
  const nodes = checkedNodes(value.map(placed => (placed as unknown[])[1]), where);
  return value.map((placed, i) => [(placed as unknown[])[0] as number, nodes[i]]);
}

/**
 * The node list after a pass: the one before without `removed` and
 * `rewritten`, then `added` and `rewritten` each at its index in the result.
 */
export function applyChange(before: WireNode[], change: WireChange, where: string): WireNode[] {
  const removed = Array.isArray(change.removed) ? change.removed : [];
  const rewritten = checkedPlaced(change.rewritten, `${where}.rewritten`);
  const placed = [...checkedPlaced(change.added, `${where}.added`), ...rewritten];
  const replaced = new Set<string>(removed);
  for (const [, node] of rewritten) {
    replaced.add(node.id);
  }
  const kept = before.filter(node => !replaced.has(node.id));
  const size = kept.length + placed.length;
  const result: (WireNode | undefined)[] = new Array(size);
  for (const [index, node] of placed) {
    if (!Number.isInteger(index) || index < 0 || index >= size || result[index] !== undefined) {
      throw new MalformedReport(`${where}: node ${node.id} is placed at index ${String(index)}, outside the graph or taken`);
    }
    result[index] = node;
  }
  let next = 0;
  for (let i = 0; i < size; i++) {
    if (result[i] === undefined) {
      result[i] = kept[next++];
    }
  }
  return result as WireNode[];
}

function checkedFusedInto(value: unknown): Map<string, number> {
  const fused = new Map<string, number>();
  if (isObject(value)) {
    for (const [id, group] of Object.entries(value as WireFusedInto)) {
      if (typeof group === 'number') {
        fused.set(id, group);
      }
    }
  }
  return fused;
}

/**
 * A full graph as drawn: each node a kernel absorbed shows that kernel's group
 * (`fused_into`) instead of its own, as v1's stored graphs had it.
 */
export function derivedGraph(wireNodes: WireNode[], fusedInto: unknown, provenance: Provenance): Graph {
  const fused = checkedFusedInto(fusedInto);
  const nodes = wireNodes.map(wire => {
    const node = provenance.node(wire);
    const group = fused.get(wire.id);
    return group === undefined || group === node.group ? node : { ...node, group };
  });
  let edges: [string, string][] | null = null;
  let modules: Record<string, string[]> | null = null;
  let dot: string | null = null;
  return {
    nodes,
    derived: true,
    get edges(): [string, string][] {
      if (!edges) {
        const list: [string, string][] = [];
        for (const wire of wireNodes) {
          for (const input of wire.inputs ?? []) {
            list.push([input, wire.id]);
          }
        }
        edges = list;
      }
      return edges;
    },
    get modules(): Record<string, string[]> {
      if (!modules) {
        // No prototype: a module path such as "__proto__" stays an ordinary key.
        const byPath: Record<string, string[]> = Object.create(null);
        for (const node of nodes) {
          (byPath[node.module] ??= []).push(node.id);
        }
        modules = byPath;
      }
      return modules;
    },
    get dot(): string {
      dot ??= graphDot(this);
      return dot;
    }
  };
}

export interface PassGraphs {
  before: Graph | null;
  after: Graph | null;
}

/**
 * Replays the passes' changes from the ATen graph: for each pass, the graph
 * before it (with what it fused drawn in the kernel's group) and after it;
 * null for passes that did not run.
 */
export function passGraphs(
  aten: WireNode[] | null,
  passes: { name: string; change: unknown }[],
  provenance: Provenance
): PassGraphs[] {
  let current = aten;
  return passes.map(pass => {
    const change = pass.change;
    if (!isObject(change) || !current) {
      return { before: null, after: null };
    }
    const after = applyChange(current, change as unknown as WireChange, `pass ${pass.name}`);
    const graphs = {
      before: derivedGraph(current, change.fused_into, provenance),
      after: derivedGraph(after, undefined, provenance)
    };
    current = after;
    return graphs;
  });
}
