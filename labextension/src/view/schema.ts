/**
 * Types for the explorer bundle and the CompileReport (torchfuser/report/schema.md,
 * schema_version 1). Every string here may come from user code: render as text only.
 */

export const REPORT_MIME_TYPE = 'application/vnd.torchfuser.report+json';
export const BUNDLE_KIND = 'torchfuser.explorer';
export const SUPPORTED_SCHEMA_VERSION = 1;

export interface GraphNode {
  id: string;
  op: string;
  target: string;
  label: string;
  shape: (number | string)[] | null; // a symbolic size is its expression as text ("s0 + 1")
  dtype: string | null;
  group: number | null;
  kernel: string | null;
  module: string;
  module_type: string;
  file: string | null;
  line: number | null;
  code: string | null;
}

export interface Graph {
  nodes: GraphNode[];
  edges: [string, string][];
  modules: Record<string, string[]>;
  dot: string;
}

export interface PassRecord {
  name: string;
  enabled: boolean;
  modified: boolean;
  seconds: number;
  stats: Record<string, number>;
  graph_before: Graph | null;
  graph_after: Graph | null;
}

export interface SourceLine {
  module: string;
  module_type: string;
  file: string | null;
  line: number | null;
  code: string | null;
}

export type CacheStatus = 'hit' | 'miss' | 'disk';

/** inline: in the calling thread (PoCL's basic device, small launches); threaded: the device's workers. */
export type Lane = 'inline' | 'threaded';

export interface Kernel {
  name: string;
  kind: string;
  group: number | null;
  cache_key: string;
  source: string;
  cache: CacheStatus;
  build_seconds: number;
  launches: number;
  seconds: number;
  mean_seconds: number | null;
  spec: string;
  nodes: string[];
  sources: SourceLine[];
  /** Absent in reports written before lanes existed. */
  lane?: Lane | string;
  /** Why that lane, with the estimated costs. */
  lane_reason?: string;
}

export interface Fallback {
  op: string;
  node: string;
  reason: string;
  module: string;
  file: string | null;
  line: number | null;
  code: string | null;
}

export interface Timings {
  lower_seconds?: number | null;
  passes_seconds?: number | null;
  codegen_seconds?: number | null;
  build_seconds?: number | null;
  compile_seconds?: number | null;
  calls?: number | null;
  eager_seconds: number | null;
  compiled_seconds: number | null;
  speedup: number | null;
  /** Profiled device time of all kernels per graph call (null before any call; absent in older reports). */
  kernel_seconds?: number | null;
  /** compiled_seconds - kernel_seconds, clamped at 0 (null unless compiled_seconds was measured). */
  host_overhead_seconds?: number | null;
}

export interface DeviceInfo {
  name: string;
  platform: string;
  type: string;
  driver: string;
  host_unified_memory: boolean;
  zero_copy: boolean;
}

export interface Report {
  schema_version: number;
  torchfuser_version: string;
  title: string;
  device: DeviceInfo | null;
  graphs: { captured: Graph | null; aten: Graph | null };
  passes: PassRecord[];
  kernels: Kernel[];
  fallbacks: Fallback[];
  timings: Timings;
  /** Sizes Dynamo made dynamic: one plan serves them all (absent or null: static shapes). */
  dynamic?: DynamicSizes | null;
  /** Dynamo's first failed guard when it compiled this frame before (absent or null: a first compile). */
  recompile_reason?: string | null;
}

export interface DynamicSizes {
  symbols: string[];
  example: number[];
  runs: { sizes: number[]; calls: number }[];
}

export interface Bundle {
  kind: typeof BUNDLE_KIND;
  schema_version: number;
  pipeline: string[];
  reports: Report[];
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Missing optional parts become empty values so the view never has to guard twice. */
function normalizeGraph(value: unknown): Graph | null {
  if (!isObject(value)) {
    return null;
  }
  return {
    nodes: Array.isArray(value.nodes) ? (value.nodes as GraphNode[]) : [],
    edges: Array.isArray(value.edges) ? (value.edges as [string, string][]) : [],
    modules: isObject(value.modules) ? (value.modules as Record<string, string[]>) : {},
    dot: typeof value.dot === 'string' ? value.dot : ''
  };
}

function normalizeReport(value: unknown): Report {
  if (!isObject(value)) {
    throw new Error('TorchFuser report is not an object');
  }
  const version = value.schema_version;
  if (version !== SUPPORTED_SCHEMA_VERSION) {
    throw new Error(
      `Unsupported TorchFuser report schema_version ${String(version)} (this view reads ${SUPPORTED_SCHEMA_VERSION})`
    );
  }
  const graphs = isObject(value.graphs) ? value.graphs : {};
  const passes = Array.isArray(value.passes) ? value.passes : [];
  return {
    ...(value as unknown as Report),
    title: typeof value.title === 'string' ? value.title : 'graph',
    graphs: { captured: normalizeGraph(graphs.captured), aten: normalizeGraph(graphs.aten) },
    passes: passes.filter(isObject).map(p => ({
      ...(p as unknown as PassRecord),
      stats: isObject(p.stats) ? (p.stats as Record<string, number>) : {},
      graph_before: normalizeGraph(p.graph_before),
      graph_after: normalizeGraph(p.graph_after)
    })),
    kernels: Array.isArray(value.kernels) ? (value.kernels as Kernel[]) : [],
    fallbacks: Array.isArray(value.fallbacks) ? (value.fallbacks as Fallback[]) : [],
    timings: isObject(value.timings)
      ? (value.timings as unknown as Timings)
      : { eager_seconds: null, compiled_seconds: null, speedup: null }
  };
}

/**
 * Accepts the explorer bundle, or a bare report (wrapped into a one-report bundle),
 * so a report saved by hand also renders.
 */
export function normalizeBundle(value: unknown): Bundle {
  if (isObject(value) && value.kind === BUNDLE_KIND) {
    const reports = Array.isArray(value.reports) ? value.reports.map(normalizeReport) : [];
    const pipeline = Array.isArray(value.pipeline)
      ? value.pipeline.filter((p): p is string => typeof p === 'string')
      : [];
    return {
      kind: BUNDLE_KIND,
      schema_version: Number(value.schema_version ?? SUPPORTED_SCHEMA_VERSION),
      pipeline: pipeline.length ? pipeline : pipelineOf(reports),
      reports
    };
  }
  if (isObject(value) && 'passes' in value) {
    const report = normalizeReport(value);
    return {
      kind: BUNDLE_KIND,
      schema_version: SUPPORTED_SCHEMA_VERSION,
      pipeline: pipelineOf([report]),
      reports: [report]
    };
  }
  throw new Error('Not a TorchFuser explorer bundle');
}

function pipelineOf(reports: Report[]): string[] {
  return reports.length ? reports[0].passes.map(p => p.name) : [];
}
