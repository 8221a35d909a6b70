/**
 * Search by op or module name. Every whitespace-separated term must occur
 * (case-insensitively) in one of the node's names: id, label, op, target,
 * module path, module type or kernel name.
 */
import { toDisplayed, type DisplayGraph } from './collapse';
import type { GraphPane, Side } from './graph_pane';
import type { Graph, GraphNode } from './schema';

function searchableText(node: GraphNode): string {
  return [node.id, node.label, node.op, node.target, node.module, node.module_type, node.kernel]
    .filter(part => typeof part === 'string' && part.length > 0)
    .join('\n')
    .toLowerCase();
}

export function parseQuery(query: string): string[] {
  return query
    .toLowerCase()
    .split(/\s+/)
    .filter(term => term.length > 0);
}

/** Ids of matching nodes; an empty query matches nothing (no filter). */
export function matchNodes(graph: Graph | null, query: string): Set<string> {
  const terms = parseQuery(query);
  const result = new Set<string>();
  if (!graph || terms.length === 0) {
    return result;
  }
  for (const node of graph.nodes) {
    const text = searchableText(node);
    if (terms.every(term => text.includes(term))) {
      result.add(node.id);
    }
  }
  return result;
}

/** What a search highlights in: each side's graph as drawn, its pane, and the match counter. */
interface SearchTargets {
  sides: Record<Side, { graph: Graph | null; display: DisplayGraph | null }>;
  panes: Record<Side, GraphPane>;
  toolbar: { setMatchCount(before: number, after: number, active: boolean): void };
}

/** The view's current query and which of its matches is centred (Enter steps to the next). */
export class SearchState {
  private query = '';
  private matchIndex = 0;

  /** Takes a query from the toolbar; true when the view should highlight and centre again. */
  update(query: string, next: boolean): boolean {
    if (query !== this.query) {
      this.query = query;
      this.matchIndex = 0;
      return true;
    }
    if (next) {
      this.matchIndex++;
    }
    return next;
  }

  /** Highlights the matches in both panes (module boxes for collapsed nodes); `focus` centres the current one. */
  apply(sides: SearchTargets['sides'], panes: SearchTargets['panes'], toolbar: SearchTargets['toolbar'], focus: boolean): void {
    const active = this.query.trim().length > 0;
    const counts: Record<Side, number> = { before: 0, after: 0 };
    for (const side of ['before', 'after'] as Side[]) {
      const { graph, display } = sides[side];
      const matches = display ? toDisplayed(matchNodes(graph, this.query), display) : new Set<string>();
      counts[side] = panes[side].setHighlight('jp-torchfuser-match', matches);
      panes[side].setSearching(active);
      if (focus && active && matches.size) {
        const ordered = [...matches];
        panes[side].focus(ordered[this.matchIndex % ordered.length]);
      }
    }
    toolbar.setMatchCount(counts.before, counts.after, active);
  }
}
