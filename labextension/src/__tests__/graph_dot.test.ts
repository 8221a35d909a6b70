/**
 * The view derives DOT (schema v2 stores none): for every graph of a report
 * the v1 compiler wrote, the derived DOT equals the DOT it stored.
 */
import { describe, expect, it } from 'vitest';
import { graphDot, groupColour, nodeTooltip, pyReprString, pyShape } from '../view/graph_dot';
import type { GraphNode } from '../view/schema';
import { loadRepoFixture } from './fixtures';

interface StoredGraph {
  nodes: GraphNode[];
  edges: [string, string][];
  dot: string;
}

function storedGraphs(bundle: any): [string, StoredGraph][] {
  const graphs: [string, StoredGraph][] = [];
  for (const report of bundle.reports) {
    for (const key of ['captured', 'aten']) {
      if (report.graphs[key]) graphs.push([`${report.title} ${key}`, report.graphs[key]]);
    }
    for (const pass of report.passes) {
      if (pass.graph_before) graphs.push([`${report.title} before ${pass.name}`, pass.graph_before]);
      if (pass.graph_after) graphs.push([`${report.title} after ${pass.name}`, pass.graph_after]);
    }
  }
  return graphs;
}

describe('DOT derived in the view', () => {
  const v1 = loadRepoFixture('gpt2_tiny_bundle_v1.json');
  const graphs = storedGraphs(v1);

  it('covers every graph of the tiny GPT-2 v1 fixture', () => {
    expect(graphs.length).toBeGreaterThanOrEqual(13);
  });

  it.each(graphs.map(([name, graph]) => [name, graph] as const))('equals the stored DOT: %s', (_name, graph) => {
    expect(graphDot(graph)).toBe(graph.dot);
  });

  it('writes Python text forms: repr of shape lists, None, escapes', () => {
    expect(pyShape([8, 's0 + 1'])).toBe("[8, 's0 + 1']");
    expect(pyShape([])).toBe('[]');
    expect(pyReprString("it's")).toBe('"it\'s"');
    expect(pyReprString('a\'b"c\\\n\u0007é\u2028')).toBe("'a\\'b\"c\\\\\\n\\x07é\\u2028'");
    expect(groupColour(-1)).toBe('#a6cee3');
    const node: GraphNode = {
      id: 'x', op: 'call_function', target: 'aten.add.Tensor', label: 'add', shape: [2], dtype: null, group: null,
      kernel: null, module: 'fc', module_type: '', file: 'model.py', line: null, code: null
    };
    expect(nodeTooltip(node)).toBe('aten.add.Tensor\nNone[2]\nmodule fc ()\nmodel.py:None');
  });

  it('keeps user text inert inside DOT strings', () => {
    const node: GraphNode = {
      id: 'a"];evil[label="x', op: 'placeholder', target: 't\\"', label: 'l\nm', shape: null, dtype: null, group: 3,
      kernel: null, module: '', module_type: '', file: null, line: null, code: null
    };
    const dot = graphDot({ nodes: [node], edges: [] });
    expect(dot).toContain('"a\\"];evil[label=\\"x" [id="a\\"];evil[label=\\"x", label="l\\nm", tooltip="t\\\\\\"", fillcolor="#fb8072", shape=ellipse];');
  });
});
