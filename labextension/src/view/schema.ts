/**
 * The view's own model of the explorer bundle and the CompileReport: the
 * schema_version 1 layout (torchfuser/report/schema.md), every graph in full.
 * decode.ts turns both wire versions into it (v2's wire types are generated
 * from report.schema.json into ../generated/report_types.ts). Every string
 * here may come from user code: render as text only.
 */

import type { WireGraphBreak, WireReplay, WireRun, WireRunKernel } from '../generated/report_types';

export const REPORT_MIME_TYPE = 'application/vnd.torchfuser.report+json';
export const BUNDLE_KIND = 'torchfuser.explorer';
/** The wire versions decode.ts reads. */
export const SUPPORTED_SCHEMA_VERSIONS = [1, 2] as const;

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
  /**
   * True when `dot` is derived from the nodes (schema v2, or a v1 graph stored
   * without DOT): fill colours are then the group colours, with no DOT to parse.
   */
  derived?: boolean;
}

export interface PassRecord {
  name: string;
  enabled: boolean;
  modified: boolean;
  seconds: number;
  stats: Record<string, number>;
  graph_before: Graph | null;
  graph_after: Graph | null;
  /** Why the pass failed (v1 kept this only as stats.error, which decoding also sets). */
  error?: string | null;
  /** What the pass did (v2 stores it; for v1 pass_change.ts derives it by diffing the two graphs). */
  change?: PassChange | null;
  /** [node id, why] for what the pass would have fused but did not (absent in older reports). */
  unfused?: [string, string][];
}

/** Node ids a pass removed, added, or kept but rewrote (changed or moved), as report.schema.json's Change. */
export interface PassChange {
  removed: string[];
  added: string[];
  rewritten: string[];
}

/** Decoded as they come on the wire (report.schema.json's GraphBreak, Replay, Run and RunKernel). */
export type GraphBreak = WireGraphBreak;
export type Replay = WireReplay;
export type Run = WireRun;
export type RunKernel = WireRunKernel;

export interface SourceLine {
  module: string;
  module_type: string;
  file: string | null;
  line: number | null;
  code: string | null;
}

export type CacheStatus = 'hit' | 'miss' | 'disk';

/** inline: in the calling thread; threaded: the device's workers; split: its work-groups divided between the two. */
export type Lane = 'inline' | 'threaded' | 'split';

export interface Kernel {
  name: string;
  /** The fused node's id in the graphs after its fusing pass (schema v2). */
  node?: string;
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
  /**
   * 1-based line of `source` -> ids of the nodes that line computes (ATen
   * nodes; lines computing nothing are absent). Absent in older reports.
   */
  line_nodes?: Record<string, string[]>;
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
  /** The graph break that ended this graph (absent or null: it ran to the frame's end). */
  graph_break?: GraphBreak | null;
  /** How steady calls ran: replayed from a tape, or why they walk the plan (absent or null: not recorded). */
  replay?: Replay | null;
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
  /** The explorer's run history, oldest first (empty outside the explorer). */
  runs: Run[];
}
