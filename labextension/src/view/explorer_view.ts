/**
 * The explorer view (.jp-torchfuser-view), host-independent. The anywidget
 * and the MIME renderer both create one and feed it bundles; the host decides
 * whether toggles and Re-run are live (a kernel is running) or not.
 */
import { afterExpanding, collapsedAtDepthIn, initialCollapseDepth } from './collapse_levels';
import {
  buildDisplayGraph,
  moduleEntries,
  MODULE_NODE_PREFIX,
  toDisplayed,
  toRaw,
  type DisplayGraph
} from './collapse';
import { clear, el } from './dom';
import { findCounterparts, indexOf, kernelFillColors, kernelForNode, type GraphIndex } from './graph_index';
import { coveredNodeColors } from './kernel_marks';
import { GraphPane, type Side } from './graph_pane';
import { GraphToolbar } from './graph_toolbar';
import { getLayoutEngine, LayoutCache, layoutEngineReady } from './layout_engine';
import { graphsToCompare, PassList, WHOLE_PIPELINE } from './pass_list';
import { changeMarks, drawnMarks, passChange } from './pass_change';
import { decodeBundle } from './decode';
import { renderBreaks } from './graph_breaks';
import { RunHistory } from './run_history';
import type { Bundle, Graph, Report } from './schema';
import { SearchState } from './search';
import { Selection } from './selection';
import { userLineKeysOf, type SourceLineChoice } from './source_lines';
import { SourcePane } from './source_pane';
import { renderFallbacks, renderHeader, renderKernelTable, renderReportSelector, renderShapes } from './summary';
import { renderTimingBar, safeColor } from './timing_bar';
import { UserLineList, type UserLine } from './user_lines';
import { measureSpan } from './user_timing';

export interface ViewHost {
  /** True when a kernel is connected: toggles and Re-run work. */
  readonly interactive: boolean;
  setEnabledPasses?(names: string[]): void;
  rerun?(enabledPasses: string[]): void;
}

interface SideState {
  graph: Graph | null;
  index: GraphIndex | null;
  display: DisplayGraph | null;
}

const OTHER: Record<Side, Side> = { before: 'after', after: 'before' };
const MIN_PANE_HEIGHT_PX = 180;
const MAX_PANE_HEIGHT_PX = 520;
const BUSY_STATUS = /^(running|compiling|busy|rerunning)/i;

export class ExplorerView {
  readonly node: HTMLElement;
  private bundle: Bundle | null = null;
  private reportIndex = 0;
  private selectedPass = WHOLE_PIPELINE;
  private enabledFromHost: string[] | null = null;
  private collapsed = new Set<string>();
  /** False until the user collapses or expands: big graphs then start collapsed to a depth chosen by size. */
  private collapseChosenByUser = false;
  private readonly searchState = new SearchState();
  /** Layouts for this view's life: the same DOT is laid out once. */
  readonly layouts = new LayoutCache();
  private readonly selection = new Selection();
  private readonly sides: Record<Side, SideState> = {
    before: { graph: null, index: null, display: null },
    after: { graph: null, index: null, display: null }
  };
  private readonly panes: Record<Side, GraphPane>;
  private readonly passList: PassList;
  private readonly toolbar: GraphToolbar;
  private readonly sourcePane = new SourcePane(choice => this.selectSourceLine(choice));
  private readonly headerSlot = el('div', { className: 'jp-torchfuser-header-slot' });
  private readonly kernelSlot = el('div', { className: 'jp-torchfuser-kernel-slot' });
  private readonly timingSlot = el('div', { className: 'jp-torchfuser-timing-slot' });
  private readonly fallbackSlot = el('div', { className: 'jp-torchfuser-fallback-slot' });
  private readonly breaksSlot = el('div', { className: 'jp-torchfuser-breaks-slot' });
  private readonly runHistory = new RunHistory();
  private readonly userLineList = new UserLineList(line => this.selectUserLine(line));
  private readonly errorSlot = el('div', { className: 'jp-torchfuser-error', attrs: { role: 'alert' } });
  private kernelColorMap = new Map<string, string>();
  private drawing: Promise<void> = Promise.resolve();
  /** When the current bundle arrived, until its first drawing is done (for the time-to-first-draw measure). */
  private shownAt: number | null = null;
  private drawToken = 0;

  constructor(private readonly host: ViewHost) {
    const paneHandlers = {
      onHover: (side: Side, id: string | null) => this.hover(side, id),
      onClick: (side: Side, id: string) => this.clickNode(side, id)
    };
    this.panes = {
      before: new GraphPane('before', paneHandlers, this.layouts),
      after: new GraphPane('after', paneHandlers, this.layouts)
    };
    this.passList = new PassList(host.interactive, {
      onSelect: name => this.selectPass(name),
      onToggle: (name, enabled) => this.togglePass(name, enabled),
      onRerun: () => this.host.rerun?.(this.enabledPasses())
    });
    this.toolbar = new GraphToolbar({
      onSearch: (query, reveal) => this.search(query, reveal),
      onCollapse: (path, collapsed) => this.setCollapsed(collapsed ? [...this.collapsed, path] : [...this.collapsed].filter(p => p !== path)),
      onCollapseLevel: depth => this.setCollapsed(this.modulesAtDepthOnEitherSide(depth)),
      onExpandAll: () => this.setCollapsed([])
    });
    this.node = el('div', { className: 'jp-torchfuser-view', attrs: { 'data-interactive': host.interactive } }, [
      this.errorSlot,
      this.headerSlot,
      el('div', { className: 'jp-torchfuser-body' }, [
        el('div', { className: 'jp-torchfuser-sidebar' }, [this.passList.node, this.kernelSlot, this.userLineList.node, this.runHistory.node]),
        el('div', { className: 'jp-torchfuser-main' }, [
          this.breaksSlot,
          this.toolbar.node,
          el('div', { className: 'jp-torchfuser-graphs' }, [this.panes.before.node, this.panes.after.node]),
          this.timingSlot,
          this.sourcePane.node,
          this.fallbackSlot
        ])
      ])
    ]);
  }

  /** Resolves when both graphs of the latest render are drawn. */
  whenDrawn(): Promise<void> {
    return this.drawing;
  }

  get report(): Report | null {
    return this.bundle?.reports[this.reportIndex] ?? null;
  }

  pane(side: Side): GraphPane {
    return this.panes[side];
  }

  setBundle(value: unknown): void {
    const started = performance.now();
    // Start Graphviz (a chunk and its workers) while the bundle is decoded; a failure shows when drawing.
    getLayoutEngine().catch(() => undefined);
    try {
      this.bundle = decodeBundle(value);
      measureSpan('torchfuser:decode', started, undefined, { title: this.bundle.reports[0]?.title ?? '' });
      this.shownAt = started;
      this.errorSlot.textContent = '';
    } catch (error) {
      this.bundle = null;
      this.errorSlot.textContent = `Cannot show this TorchFuser report: ${String((error as Error)?.message ?? error)}`;
    }
    if (this.reportIndex >= (this.bundle?.reports.length ?? 0)) {
      this.reportIndex = 0;
    }
    this.selection.set(null);
    this.collapseChosenByUser = false;
    this.sourcePane.showHint();
    this.renderReport();
  }

  /** The host's enabled-pass list (null: take it from the report). */
  setEnabledPasses(names: string[] | null): void {
    this.enabledFromHost = names ? [...names] : null;
    this.renderPassList();
  }

  setStatus(status: string | null | undefined): void {
    const text = status ?? '';
    this.passList.setStatus(text === 'idle' ? '' : text, BUSY_STATUS.test(text));
  }

  enabledPasses(): string[] {
    if (this.enabledFromHost) {
      return [...this.enabledFromHost];
    }
    return (this.report?.passes ?? []).filter(p => p.enabled).map(p => p.name);
  }

  selectReport(index: number): void {
    this.reportIndex = index;
    this.selection.set(null);
    this.collapseChosenByUser = false;
    this.sourcePane.showHint();
    this.renderReport();
  }

  selectPass(name: string): void {
    this.selectedPass = name;
    this.renderPassList();
    this.drawGraphs();
  }

  /** The user's choice of collapsed modules (kept across pass switches). */
  setCollapsed(paths: string[]): void {
    this.collapseChosenByUser = true;
    this.collapsed = new Set(paths);
    this.drawGraphs();
  }

  /** Expands a collapsed module; one too big to draw whole shows its child modules collapsed instead. */
  expandModule(path: string): void {
    this.setCollapsed(afterExpanding(this.collapsed, path, [this.sides.before.graph, this.sides.after.graph]));
  }

  private modulesAtDepthOnEitherSide(depth: number): string[] {
    return collapsedAtDepthIn([this.sides.before.graph, this.sides.after.graph], depth);
  }

  private togglePass(name: string, enabled: boolean): void {
    const names = new Set(this.enabledPasses());
    if (enabled) {
      names.add(name);
    } else {
      names.delete(name);
    }
    // Keep pipeline order so the kernel side can pass the list straight on.
    const order = this.bundle?.pipeline ?? [];
    const ordered = [...order.filter(n => names.has(n)), ...[...names].filter(n => !order.includes(n))];
    this.enabledFromHost = ordered;
    this.host.setEnabledPasses?.(ordered);
  }

  private renderReport(): void {
    const report = this.report;
    clear(this.headerSlot);
    clear(this.kernelSlot);
    clear(this.timingSlot);
    clear(this.fallbackSlot);
    clear(this.breaksSlot);
    const breaks = renderBreaks(this.bundle?.reports ?? [], index => this.selectReport(index));
    if (breaks) {
      this.breaksSlot.append(breaks);
    }
    this.userLineList.render(report);
    this.runHistory.render(this.bundle?.runs ?? [], this.bundle?.pipeline ?? []);
    if (report) {
      const selector = renderReportSelector(
        (this.bundle?.reports ?? []).map(r => r.title),
        this.reportIndex,
        index => this.selectReport(index)
      );
      this.headerSlot.append(renderHeader(report));
      if (selector) {
        this.headerSlot.append(selector);
      }
      const shapes = renderShapes(report);
      if (shapes) {
        this.headerSlot.append(shapes);
      }
      this.kernelSlot.append(renderKernelTable(report, name => this.selectKernel(name)));
      const colors = kernelFillColors(report);
      this.kernelColorMap = colors;
      this.timingSlot.append(renderTimingBar(report, name => colors.get(name), name => this.selectKernel(name)));
      const fallbacks = renderFallbacks(report);
      if (fallbacks) {
        this.fallbackSlot.append(fallbacks);
      }
    }
    if (this.selectedPass !== WHOLE_PIPELINE && !report?.passes.some(p => p.name === this.selectedPass)) {
      this.selectedPass = WHOLE_PIPELINE;
    }
    this.renderPassList();
    this.drawGraphs();
  }

  private renderPassList(): void {
    this.passList.render(this.report, this.bundle?.pipeline ?? [], new Set(this.enabledPasses()), this.selectedPass);
  }

  private drawGraphs(): void {
    const token = ++this.drawToken;
    if (layoutEngineReady()) {
      this.drawNow(token);
      return;
    }
    // The page's first drawing: let Graphviz's chunk load and its worker start compiling first, so that
    // preparing the drawing (big graphs: a few hundred ms) overlaps the compile instead of delaying it.
    const pending: Promise<void> = getLayoutEngine()
      .catch(() => undefined)
      .then(() => {
        if (token === this.drawToken) {
          this.drawNow(token);
        }
        return this.drawing === pending ? undefined : this.drawing; // the drawing that followed, if any
      });
    this.drawing = pending;
  }

  private drawNow(token: number): void {
    const started = performance.now();
    const selection = graphsToCompare(this.report, this.selectedPass);
    let autoDepth: number | null = null;
    if (!this.collapseChosenByUser) {
      autoDepth = initialCollapseDepth([selection.before, selection.after]);
      this.collapsed = new Set(autoDepth === null ? [] : collapsedAtDepthIn([selection.before, selection.after], autoDepth));
    }
    for (const side of ['before', 'after'] as Side[]) {
      const graph = selection[side];
      this.sides[side] = {
        graph,
        index: graph ? indexOf(graph) : null,
        display: graph ? buildDisplayGraph(graph, this.collapsed) : null
      };
      const count = graph ? ` · ${graph.nodes.length} nodes` : '';
      this.panes[side].setCaption(`${selection.caption[side === 'before' ? 0 : 1]}${count}`);
    }
    const entries = moduleEntries(selection.after ?? selection.before);
    this.toolbar.setModules(entries.length ? entries : moduleEntries(selection.before), this.collapsed, autoDepth);
    measureSpan('torchfuser:prepare', started);
    this.drawing = Promise.all(
      (['before', 'after'] as Side[]).map(side =>
        this.panes[side].render(this.sides[side].graph, this.sides[side].display, selection.message)
      )
    ).then(() => {
      if (token === this.drawToken) {
        this.sizePanes();
        this.paintCoveredNodes();
        this.markPassChange();
        this.searchState.apply(this.sides, this.panes, this.toolbar, false);
        this.applyKernelSelection();
        const detail = {
          title: this.report?.title ?? '',
          drawn: this.panes.before.drawnNodeIds.length + this.panes.after.drawnNodeIds.length
        };
        measureSpan('torchfuser:draw', started, undefined, detail);
        if (this.shownAt !== null) {
          measureSpan('torchfuser:first-draw', this.shownAt, undefined, detail);
          this.shownAt = null;
        }
      }
    });
  }

  /** Kernel colours on the nodes they cover where the graph has none (before fusion). */
  private paintCoveredNodes(): void {
    for (const side of ['before', 'after'] as Side[]) {
      const { index, display } = this.sides[side];
      if (index && display) {
        for (const [id, color] of coveredNodeColors(index, display, this.report?.kernels ?? [], this.kernelColorMap)) {
          this.panes[side].paintNode(id, safeColor(color));
        }
      }
    }
  }

  /** What the selected pass removed, added and rewrote, on the drawn nodes and the module boxes hiding them. */
  private markPassChange(): void {
    const record = this.report?.passes.find(p => p.name === this.selectedPass);
    const marks = changeMarks(this.selectedPass === WHOLE_PIPELINE ? null : passChange(record));
    this.panes.before.markChanges(drawnMarks(marks.before, this.sides.before.display));
    this.panes.after.markChanges(drawnMarks(marks.after, this.sides.after.display));
  }

  /** Small graphs get short panes; big ones stop at the maximum and pan. */
  private sizePanes(): void {
    const needed = Math.max(this.panes.before.naturalHeightPx, this.panes.after.naturalHeightPx);
    const height = Math.min(MAX_PANE_HEIGHT_PX, Math.max(MIN_PANE_HEIGHT_PX, needed + 24));
    this.panes.before.setHeight(height);
    this.panes.after.setHeight(height);
  }

  private rawCounterparts(side: Side, displayedId: string): Set<string> {
    const from = this.sides[side];
    const to = this.sides[OTHER[side]];
    const result = new Set<string>();
    if (!from.display || !from.index || !to.index) {
      return result;
    }
    for (const rawId of toRaw(displayedId, from.display)) {
      for (const id of findCounterparts(rawId, from.index, to.index, this.report?.kernels ?? [])) {
        result.add(id);
      }
    }
    return result;
  }

  /** Hover: the node itself, and its counterparts on the other side. */
  hover(side: Side, displayedId: string | null): void {
    const other = OTHER[side];
    if (!displayedId) {
      this.panes.before.setHighlight('jp-torchfuser-hover', []);
      this.panes.after.setHighlight('jp-torchfuser-hover', []);
      this.panes.before.setHighlight('jp-torchfuser-counterpart', []);
      this.panes.after.setHighlight('jp-torchfuser-counterpart', []);
      return;
    }
    const display = this.sides[other].display;
    const counterparts = display ? toDisplayed(this.rawCounterparts(side, displayedId), display) : new Set<string>();
    this.panes[side].setHighlight('jp-torchfuser-hover', [displayedId]);
    this.panes[other].setHighlight('jp-torchfuser-hover', []);
    this.panes[other].setHighlight('jp-torchfuser-counterpart', counterparts);
    this.panes[side].setHighlight('jp-torchfuser-counterpart', []);
  }

  private clickNode(side: Side, displayedId: string): void {
    if (displayedId.startsWith(MODULE_NODE_PREFIX)) {
      this.expandModule(displayedId.slice(MODULE_NODE_PREFIX.length));
      return;
    }
    const node = this.sides[side].index?.byId.get(displayedId);
    if (!node) {
      return;
    }
    const kernel = kernelForNode(node, this.report?.kernels ?? []);
    if (kernel) {
      this.selectKernel(kernel.name);
      return;
    }
    this.selection.set(null);
    this.applyKernelSelection();
    const fallback = this.report?.fallbacks.find(f => f.node === node.id);
    this.sourcePane.showNode(node, fallback);
    this.panes[side].setHighlight('jp-torchfuser-selected', [displayedId]);
  }

  /** Shows the kernel's source and marks its node(s) and covered nodes. */
  selectKernel(name: string): void {
    const kernel = this.report?.kernels.find(k => k.name === name);
    if (!kernel) {
      return;
    }
    this.selection.set(name);
    this.sourcePane.showKernel(kernel, this.report?.timings?.calls ?? null);
    this.applyKernelSelection(true);
  }

  /** A user line: its kernels' nodes highlighted in both graphs. */
  selectUserLine(line: UserLine): void {
    this.selection.set(null, line.kernels);
    this.applyKernelSelection(true);
    this.userLineList.highlight({ keys: [line.key] });
  }

  /** An OpenCL line of the shown kernel: the nodes it computes, and the user lines they came from. */
  private selectSourceLine(choice: SourceLineChoice): void {
    this.selection.set(choice.kernel.name, [], choice);
    this.applyKernelSelection(true);
  }

  private applyKernelSelection(reveal = false): void {
    const { kernel, lineKernels, sourceLine } = this.selection;
    for (const side of ['before', 'after'] as Side[]) {
      const { index, display } = this.sides[side];
      const { selected, highlighted } = this.selection.nodesIn(index, display, this.report?.kernels ?? []);
      this.panes[side].setHighlight('jp-torchfuser-selected', selected);
      this.panes[side].setHighlight('jp-torchfuser-highlight', highlighted);
      const first = [...highlighted, ...selected][0];
      if (reveal && first !== undefined) {
        this.panes[side].reveal(first);
      }
    }
    this.kernelSlot.querySelectorAll('tr[data-kernel]').forEach(row => {
      row.toggleAttribute('data-selected', row.getAttribute('data-kernel') === kernel);
    });
    if (sourceLine) {
      const keys = userLineKeysOf(this.report, sourceLine);
      this.userLineList.highlight({ keys });
      this.sourcePane.highlightUserLines(keys);
    } else if (!lineKernels.length) {
      this.userLineList.highlight({ kernel });
    }
  }

  /**
   * A new query highlights its matches and centres the first; the same query
   * again with `next` (Enter) centres the next match, wrapping around.
   */
  search(query: string, next: boolean): void {
    if (this.searchState.update(query, next)) {
      this.searchState.apply(this.sides, this.panes, this.toolbar, true);
    }
  }

  dispose(): void {
    this.drawToken++;
    this.node.remove();
  }
}
