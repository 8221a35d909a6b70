/**
 * Test helper: a v1 bundle → schema_version 2, following report.schema.json
 * (and the compiler's torchfuser/report/wire.py). It lets the decoder be
 * checked on a real compile (the tiny GPT-2 fixture) by a round trip.
 *
 * v1 graphs carry fused groups already painted on; v2 keeps each node's own
 * group and lists the painting in `fused_into`. The v1 ATen graph's own groups
 * are not recorded, so the encoder treats them all as painted (own group null),
 * and a pass's graph before as the previous graph after, painted.
 */
const NODE_FIELDS = ['id', 'op', 'target', 'label', 'shape', 'dtype', 'group', 'kernel'] as const;

class Interner {
  modules: [string, string][] = [];
  locations: [string, number, string | null][] = [];
  private moduleIndex = new Map<string, number>();
  private locationIndex = new Map<string, number>();

  module(path: string, type: string): number {
    const key = JSON.stringify([path ?? '', type ?? '']);
    if (!this.moduleIndex.has(key)) {
      this.moduleIndex.set(key, this.modules.length);
      this.modules.push([path ?? '', type ?? '']);
    }
    return this.moduleIndex.get(key)!;
  }

  location(file: string | null, line: number | null, code: string | null): number | null {
    if (file === null || file === undefined) {
      return null;
    }
    const key = JSON.stringify([file, line, code]);
    if (!this.locationIndex.has(key)) {
      this.locationIndex.set(key, this.locations.length);
      this.locations.push([file, line as number, code]);
    }
    return this.locationIndex.get(key)!;
  }

  provenance(entry: any): [number, number | null] {
    return [this.module(entry.module ?? '', entry.module_type ?? ''), this.location(entry.file, entry.line, entry.code)];
  }
}

function inputsOf(graph: any): Map<string, string[]> {
  const inputs = new Map<string, string[]>(graph.nodes.map((n: any) => [n.id, []]));
  for (const [from, to] of graph.edges) {
    inputs.get(to)?.push(from);
  }
  return inputs;
}

/** Each node with its own group (`own`), its inputs, and interned provenance. */
function encodeNodes(graph: any, interner: Interner, own: (node: any) => number | null): any[] {
  const inputs = inputsOf(graph);
  return graph.nodes.map((n: any) => {
    const [module, location] = interner.provenance(n);
    const wire: any = {};
    for (const key of NODE_FIELDS) wire[key] = n[key];
    return { ...wire, group: own(n), inputs: inputs.get(n.id) ?? [], module, location };
  });
}

function paint(v1Nodes: any[], own: Map<string, number | null>): Record<string, number> {
  const fused: Record<string, number> = {};
  for (const n of v1Nodes) {
    if (n.group !== null && n.group !== own.get(n.id)) fused[n.id] = n.group;
  }
  return fused;
}

/** A valid change (not the smallest): kept nodes stay out while equal and in their old order. */
function encodeChange(before: any[], after: any[], fused: Record<string, number>): any {
  const old = new Map(before.map((n, i) => [n.id, { index: i, node: n }]));
  const afterIds = new Set(after.map(n => n.id));
  const added: any[] = [];
  const rewritten: any[] = [];
  let last = -1;
  after.forEach((n, index) => {
    const previous = old.get(n.id);
    if (!previous) {
      added.push([index, n]);
    } else if (previous.index > last && JSON.stringify(previous.node) === JSON.stringify(n)) {
      last = previous.index;
    } else {
      rewritten.push([index, n]);
    }
  });
  return { removed: before.filter(n => !afterIds.has(n.id)).map(n => n.id), added, rewritten, fused_into: fused };
}

export function encodeV2(bundle: any): any {
  return { ...bundle, schema_version: 2, reports: bundle.reports.map(encodeReportV2) };
}

function encodeReportV2(report: any): any {
  const interner = new Interner();
  const graph = (g: any, fused = false) => {
    if (!g) return null;
    const nodes = encodeNodes(g, interner, n => (fused ? null : n.group));
    const encoded: any = { nodes };
    const painted = fused ? paint(g.nodes, new Map(nodes.map(n => [n.id, n.group]))) : {};
    if (Object.keys(painted).length) encoded.fused_into = painted;
    return encoded;
  };
  const aten = graph(report.graphs.aten, true);
  let current: any[] | null = aten?.nodes ?? null;
  const passes = report.passes.map((p: any) => {
    const { error, ...stats } = p.stats ?? {};
    let change = null;
    if (p.enabled && current && p.graph_after) {
      const after = encodeNodes(p.graph_after, interner, n => n.group);
      const own = new Map(current.map(n => [n.id, n.group]));
      change = encodeChange(current, after, paint(p.graph_before.nodes, own));
      current = after;
    }
    return { name: p.name, enabled: p.enabled, modified: p.modified, seconds: p.seconds, stats, error: error ?? null, change };
  });
  const kernelSources: Record<string, any> = {};
  const kernels = report.kernels.map((k: any) => {
    const { source, spec, ...rest } = k;
    kernelSources[k.cache_key] ??= { source, spec };
    return { ...rest, sources: k.sources.map((s: any) => interner.provenance(s)) };
  });
  const fallbacks = report.fallbacks.map((f: any) => {
    const [module, location] = interner.provenance(f);
    return { op: f.op, node: f.node, reason: f.reason, module, location };
  });
  return {
    ...report,
    schema_version: 2,
    modules: interner.modules,
    locations: interner.locations,
    graphs: { captured: graph(report.graphs.captured), aten },
    passes,
    kernel_sources: kernelSources,
    kernels,
    fallbacks
  };
}
