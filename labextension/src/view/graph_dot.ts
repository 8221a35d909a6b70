/**
 * A report graph → Graphviz DOT, the view's copy of the compiler's
 * torchfuser/report/dot.py (graph_dot, _tooltip, dot_quote, GROUP_COLOURS).
 * Schema v2 stores no DOT, so the view derives it; for a v1 graph the result
 * equals the DOT the compiler stored, character for character (a vitest
 * compares them), which is why Python's own text forms (repr of a shape list,
 * `None`) are reproduced here.
 */
import { nodeFillColors } from './dot_text';
import type { Graph, GraphNode } from './schema';

export const GROUP_COLOURS = [
  '#8dd3c7', '#ffffb3', '#bebada', '#fb8072', '#80b1d3', '#fdb462', '#b3de69', '#fccde5',
  '#bc80bd', '#ccebc5', '#ffed6f', '#a6cee3'
];

/** Python's `group % len(GROUP_COLOURS)`: never negative. */
export function groupColour(group: number): string {
  const n = GROUP_COLOURS.length;
  return GROUP_COLOURS[((group % n) + n) % n];
}

/** Python's dot_quote: only backslash, double quote and "\n" are escaped. */
export function pyDotQuote(text: unknown): string {
  return '"' + pyStr(text).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';
}

/** Python's str() of the values a report carries (None, bools, numbers, strings). */
function pyStr(value: unknown): string {
  if (value === null || value === undefined) {
    return 'None';
  }
  if (typeof value === 'boolean') {
    return value ? 'True' : 'False';
  }
  return String(value);
}

// Python's str.isprintable() is false for these categories, except the plain space.
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

function hex(code: number, digits: number): string {
  return code.toString(16).padStart(digits, '0');
}

/** Python's repr() of a str. */
export function pyReprString(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === quote || ch === '\\') {
      out += '\\' + ch;
    } else if (ch === '\t') {
      out += '\\t';
    } else if (ch === '\n') {
      out += '\\n';
    } else if (ch === '\r') {
      out += '\\r';
    } else if (code < 0x20 || code === 0x7f) {
      out += '\\x' + hex(code, 2);
    } else if (code < 0x7f || ch === ' ' || !NOT_PRINTABLE.test(ch)) {
      out += ch;
    } else if (code <= 0xff) {
      out += '\\x' + hex(code, 2);
    } else if (code <= 0xffff) {
      out += '\\u' + hex(code, 4);
    } else {
      out += '\\U' + hex(code, 8);
    }
  }
  return out + quote;
}

/** Python's str() of a shape list: `[8, 32]`, `['s0 + 1', 32]`. */
export function pyShape(shape: (number | string)[]): string {
  return '[' + shape.map(size => (typeof size === 'string' ? pyReprString(size) : pyStr(size))).join(', ') + ']';
}

/** The hover text Graphviz puts on a node: target, dtype and shape, module, source line. */
export function nodeTooltip(node: GraphNode): string {
  const parts = [pyStr(node.target)];
  if (node.shape !== null && node.shape !== undefined) {
    parts.push(`${pyStr(node.dtype)}${pyShape(node.shape)}`);
  }
  if (node.module) {
    parts.push(`module ${node.module} (${pyStr(node.module_type)})`);
  }
  if (node.file) {
    parts.push(`${node.file}:${pyStr(node.line)}` + (node.code ? `  ${node.code}` : ''));
  }
  return parts.join('\n');
}

export const GRAPH_HEADER = [
  'digraph G {',
  '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname="Helvetica"];',
  '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica", fontsize=10, ' +
    'height=0.3, margin="0.08,0.04"];',
  '  edge [arrowsize=0.6];'
];

/** One node statement, exactly as the compiler writes it. */
export function nodeStatement(node: GraphNode): string {
  const label = pyStr(node.label) + (node.shape !== null && node.shape !== undefined ? `\n${pyShape(node.shape)}` : '');
  const attrs = [`id=${pyDotQuote(node.id)}`, `label=${pyDotQuote(label)}`, `tooltip=${pyDotQuote(nodeTooltip(node))}`];
  if (node.group !== null && node.group !== undefined) {
    attrs.push(`fillcolor=${pyDotQuote(groupColour(node.group))}`);
  }
  if (node.kernel) {
    attrs.push('class="jp-torchfuser-kernel"', 'penwidth=2', 'shape=box3d');
  } else if (node.op === 'placeholder' || node.op === 'output') {
    attrs.push('shape=ellipse');
  }
  return `  ${pyDotQuote(node.id)} [${attrs.join(', ')}];`;
}

/** DOT for a graph's nodes (drawn groups already applied) and edges. */
export function graphDot(graph: { nodes: GraphNode[]; edges: [string, string][] }): string {
  const lines = [...GRAPH_HEADER];
  for (const node of graph.nodes) {
    lines.push(nodeStatement(node));
  }
  for (const [from, to] of graph.edges) {
    lines.push(`  ${pyDotQuote(from)} -> ${pyDotQuote(to)};`);
  }
  lines.push('}');
  return lines.join('\n');
}

const fillCache = new WeakMap<Graph, Map<string, string>>();

/**
 * node id → fill colour as drawn. A derived graph's colours are its group
 * colours (no DOT is built or parsed for them); a stored DOT (v1, or the
 * hand-made fixtures) is read once per graph.
 */
export function graphFillColors(graph: Graph): Map<string, string> {
  let colors = fillCache.get(graph);
  if (!colors) {
    if (graph.derived) {
      colors = new Map();
      for (const node of graph.nodes) {
        if (node.group !== null && node.group !== undefined) {
          colors.set(node.id, groupColour(node.group));
        }
      }
    } else {
      colors = nodeFillColors(graph.dot);
    }
    fillCache.set(graph, colors);
  }
  return colors;
}
