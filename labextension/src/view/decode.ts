/**
 * Bundle JSON (schema_version 1 or 2, or a bare report of either) → the
 * view's model (schema.ts). v1 is already that layout: missing parts become
 * empty values. v2 is expanded: interned module paths and source lines
 * resolved, per-pass graphs replayed from the changes (wire_graphs.ts),
 * kernel source and spec looked up by cache key, a failed pass's error shown
 * in its stats as v1 did. Any other version is refused with a message.
 */
import type { WireFallback, WireKernel, WireKernelSource, WireNode, WireReport } from '../generated/report_types';
import { graphDot } from './graph_dot';
import {
  BUNDLE_KIND,
  SUPPORTED_SCHEMA_VERSIONS,
  type Bundle,
  type Fallback,
  type Graph,
  type GraphBreak,
  type GraphNode,
  type Kernel,
  type PassRecord,
  type Replay,
  type Report,
  type Run,
  type Timings
} from './schema';
import { changeFromWire } from './pass_change';
import { checkedNodes, derivedGraph, MalformedReport, passGraphs, Provenance } from './wire_graphs';

export { MalformedReport };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function list(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

function strings(value: unknown): string[] {
  return list(value).filter((s): s is string => typeof s === 'string');
}

function finiteOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/**
 * A kernel's line -> node ids map, keeping only 1-based line keys and string
 * ids (absent, or nothing valid: undefined, as in reports older than the map).
 */
const MAX_RUN_LINES = 100_000; // a kernel's source is far shorter: a bad run cannot make the view loop for long

/** One key per line: the wire's "first-last" runs expanded (other keys, never __proto__ or the like, dropped). */
function decodeLineNodes(value: unknown): Record<string, string[]> | undefined {
  if (!isObject(value)) {
    return undefined;
  }
  const entries: [string, string[]][] = [];
  for (const [key, ids] of Object.entries(value)) {
    const run = /^([1-9][0-9]*)(?:-([1-9][0-9]*))?$/.exec(key);
    const nodes = strings(ids);
    if (!run || !nodes.length) {
      continue;
    }
    const first = Number(run[1]);
    const last = run[2] === undefined ? first : Math.min(Number(run[2]), first + MAX_RUN_LINES);
    for (let line = first; line <= last; line++) {
      entries.push([String(line), nodes]);
    }
  }
  return entries.length ? Object.fromEntries(entries) : undefined;
}

/** [node id, why] pairs; anything else dropped (absent in older reports: empty). */
function decodeUnfused(value: unknown): [string, string][] {
  return list(value)
    .filter((entry): entry is unknown[] => Array.isArray(entry) && entry.length >= 2)
    .map(([id, why]) => [String(id), String(why)]);
}

function decodeGraphBreak(value: unknown): GraphBreak | null {
  if (!isObject(value)) {
    return null;
  }
  return {
    reason: String(value.reason ?? ''),
    explanation: typeof value.explanation === 'string' ? value.explanation : '',
    hints: strings(value.hints),
    file: stringOrNull(value.file),
    line: finiteOrNull(value.line),
    code: stringOrNull(value.code)
  };
}

function countOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : null;
}

/** How steady calls ran; null when absent (reports written before the field) or not an object. */
function decodeReplay(value: unknown): Replay | null {
  if (!isObject(value)) {
    return null;
  }
  return {
    calls: countOrNull(value.calls) ?? 0,
    replayed: countOrNull(value.replayed) ?? 0,
    launches: countOrNull(value.launches),
    run_as: countOrNull(value.run_as),
    walks_because: stringOrNull(value.walks_because),
    ...(countOrNull(value.new_sizes) !== null ? { new_sizes: countOrNull(value.new_sizes)! } : {}),
    ...(typeof value.new_sizes_walk_because === 'string' ? { new_sizes_walk_because: value.new_sizes_walk_because } : {})
  };
}

/** The parts of a report both versions may carry and this view checks: graph break, recompile reason, replay. */
function decodeCheckedFields(value: Record<string, unknown>): Pick<Report, 'graph_break' | 'recompile_reason' | 'replay'> {
  return {
    graph_break: decodeGraphBreak(value.graph_break),
    recompile_reason: stringOrNull(value.recompile_reason),
    replay: decodeReplay(value.replay)
  };
}

function decodeRun(value: Record<string, unknown>, index: number): Run {
  return {
    number: typeof value.number === 'number' ? value.number : index + 1,
    enabled_passes: strings(value.enabled_passes),
    reused: Boolean(value.reused),
    graphs: typeof value.graphs === 'number' ? value.graphs : 0,
    kernels: list(value.kernels)
      .filter(isObject)
      .map(k => ({
        name: String(k.name ?? ''),
        kind: String(k.kind ?? ''),
        uses: typeof k.uses === 'number' ? k.uses : 0,
        seconds_per_call: typeof k.seconds_per_call === 'number' ? k.seconds_per_call : 0
      })),
    eager_seconds: finiteOrNull(value.eager_seconds),
    compiled_seconds: finiteOrNull(value.compiled_seconds),
    speedup: finiteOrNull(value.speedup)
  };
}

const NO_TIMINGS: Timings = { eager_seconds: null, compiled_seconds: null, speedup: null };

function unsupported(version: unknown): Error {
  return new Error(
    `Unsupported TorchFuser report schema_version ${String(version)} ` +
      `(this view reads ${SUPPORTED_SCHEMA_VERSIONS.join(' and ')})`
  );
}

// ---- schema_version 1 --------------------------------------------------------------------------

/** A v1 graph; one stored without DOT gets the compiler's DOT derived when first drawn. */
function normalizeGraphV1(value: unknown): Graph | null {
  if (!isObject(value)) {
    return null;
  }
  const nodes = list(value.nodes) as GraphNode[];
  const edges = list(value.edges) as [string, string][];
  const modules = isObject(value.modules) ? (value.modules as Record<string, string[]>) : {};
  if (typeof value.dot === 'string' && value.dot) {
    return { nodes, edges, modules, dot: value.dot };
  }
  let dot: string | null = null;
  return {
    nodes,
    edges,
    modules,
    derived: true,
    get dot(): string {
      dot ??= graphDot({ nodes, edges });
      return dot;
    }
  };
}

function decodeReportV1(value: Record<string, unknown>): Report {
  const graphs = isObject(value.graphs) ? value.graphs : {};
  return {
    ...(value as unknown as Report),
    ...decodeCheckedFields(value),
    title: typeof value.title === 'string' ? value.title : 'graph',
    graphs: { captured: normalizeGraphV1(graphs.captured), aten: normalizeGraphV1(graphs.aten) },
    passes: list(value.passes)
      .filter(isObject)
      .map(p => ({
        ...(p as unknown as PassRecord),
        change: undefined, // derived from the two graphs when first asked (pass_change.ts)
        unfused: decodeUnfused(p.unfused),
        stats: isObject(p.stats) ? (p.stats as Record<string, number>) : {},
        graph_before: normalizeGraphV1(p.graph_before),
        graph_after: normalizeGraphV1(p.graph_after)
      })),
    kernels: list(value.kernels)
      .filter(isObject)
      .map(k => ({ ...(k as unknown as Kernel), line_nodes: decodeLineNodes(k.line_nodes) })),
    fallbacks: list(value.fallbacks) as Fallback[],
    timings: isObject(value.timings) ? (value.timings as unknown as Timings) : NO_TIMINGS
  };
}

// ---- schema_version 2 --------------------------------------------------------------------------

function decodeKernel(kernel: WireKernel, sources: Record<string, WireKernelSource>, provenance: Provenance): Kernel {
  const shared = Object.prototype.hasOwnProperty.call(sources, kernel.cache_key) ? sources[kernel.cache_key] : undefined;
  return {
    ...(kernel as unknown as Kernel),
    source: typeof shared?.source === 'string' ? shared.source : '',
    spec: typeof shared?.spec === 'string' ? shared.spec : '',
    nodes: list(kernel.nodes).filter((id): id is string => typeof id === 'string'),
    line_nodes: decodeLineNodes(kernel.line_nodes),
    sources: list(kernel.sources).map(ref => {
      const [module, location] = Array.isArray(ref) ? ref : [];
      return provenance.fields(module, location);
    })
  };
}

function decodeFallback(fallback: WireFallback, provenance: Provenance): Fallback {
  const { module, file, line, code } = provenance.fields(fallback.module, fallback.location);
  return { op: String(fallback.op), node: String(fallback.node), reason: String(fallback.reason), module, file, line, code };
}

function decodeWireGraph(
  value: unknown,
  where: string,
  provenance: Provenance
): { graph: Graph | null; nodes: WireNode[] | null } {
  if (!isObject(value)) {
    return { graph: null, nodes: null };
  }
  const nodes = checkedNodes(value.nodes, where);
  return { graph: derivedGraph(nodes, value.fused_into, provenance), nodes };
}

function decodeReportV2(value: Record<string, unknown>): Report {
  const wire = value as unknown as WireReport;
  const provenance = new Provenance(list(wire.modules) as WireReport['modules'], list(wire.locations) as WireReport['locations']);
  const graphs = isObject(wire.graphs) ? wire.graphs : { captured: null, aten: null };
  const captured = decodeWireGraph(graphs.captured, 'graphs.captured', provenance);
  const aten = decodeWireGraph(graphs.aten, 'graphs.aten', provenance);
  const passes = list(wire.passes).filter(isObject) as unknown as WireReport['passes'];
  const names = passes.map(p => ({ name: String(p.name), change: p.change }));
  const chain = passGraphs(aten.nodes, names, provenance);
  const kernelSources = isObject(wire.kernel_sources) ? wire.kernel_sources : {};
  // Interned tables are resolved into the graphs and kernels; the rest passes through.
  const rest: Record<string, unknown> = { ...value };
  delete rest.modules;
  delete rest.locations;
  delete rest.kernel_sources;
  return {
    ...(rest as unknown as Report),
    ...decodeCheckedFields(value),
    title: typeof wire.title === 'string' ? wire.title : 'graph',
    graphs: { captured: captured.graph, aten: aten.graph },
    passes: passes.map((p, i) => {
      const stats: Record<string, number> = isObject(p.stats) ? { ...p.stats } : {};
      const error = typeof p.error === 'string' ? p.error : null;
      if (error !== null) {
        (stats as Record<string, unknown>).error = error; // where v1 kept it, and where the pass list shows it
      }
      return {
        name: String(p.name),
        enabled: Boolean(p.enabled),
        modified: Boolean(p.modified),
        seconds: typeof p.seconds === 'number' ? p.seconds : 0,
        stats,
        error,
        change: changeFromWire(p.change),
        unfused: decodeUnfused(p.unfused),
        graph_before: chain[i].before,
        graph_after: chain[i].after
      };
    }),
    kernels: list(wire.kernels).filter(isObject).map(k => decodeKernel(k as unknown as WireKernel, kernelSources, provenance)),
    fallbacks: list(wire.fallbacks).filter(isObject).map(f => decodeFallback(f as unknown as WireFallback, provenance)),
    timings: isObject(wire.timings) ? (wire.timings as unknown as Timings) : NO_TIMINGS
  };
}

// ---- either ------------------------------------------------------------------------------------

export function decodeReport(value: unknown): Report {
  if (!isObject(value)) {
    throw new Error('TorchFuser report is not an object');
  }
  const version = value.schema_version;
  if (version === 1) {
    return decodeReportV1(value);
  }
  if (version === 2) {
    try {
      return decodeReportV2(value);
    } catch (error) {
      if (error instanceof MalformedReport) {
        throw new Error(`Malformed TorchFuser report (schema_version 2): ${error.message}`);
      }
      throw error;
    }
  }
  throw unsupported(version);
}

/**
 * Accepts the explorer bundle, or a bare report (wrapped into a one-report
 * bundle), so a report saved by hand also renders.
 */
export function decodeBundle(value: unknown): Bundle {
  if (isObject(value) && value.kind === BUNDLE_KIND) {
    const version = value.schema_version ?? 1;
    if (!(SUPPORTED_SCHEMA_VERSIONS as readonly unknown[]).includes(version)) {
      throw unsupported(version);
    }
    const reports = list(value.reports).map(decodeReport);
    const pipeline = list(value.pipeline).filter((p): p is string => typeof p === 'string');
    return {
      kind: BUNDLE_KIND,
      schema_version: version as number,
      pipeline: pipeline.length ? pipeline : pipelineOf(reports),
      reports,
      runs: list(value.runs).filter(isObject).map(decodeRun)
    };
  }
  if (isObject(value) && 'passes' in value) {
    const report = decodeReport(value);
    return { kind: BUNDLE_KIND, schema_version: report.schema_version, pipeline: pipelineOf([report]), reports: [report], runs: [] };
  }
  throw new Error('Not a TorchFuser explorer bundle');
}

function pipelineOf(reports: Report[]): string[] {
  return reports.length ? reports[0].passes.map(p => p.name) : [];
}
