/**
 * One graph pane (.jp-torchfuser-graph[data-side]): lays out DOT with
 * Graphviz, inserts the sanitised SVG, tags node groups with their node ids,
 * and reports hover and click by node id.
 */
import { KERNEL_CLASS, MODULE_CLASS, type DisplayGraph } from './collapse';
import { clear, el } from './dom';
import { LayoutCache, type LayoutEngine } from './layout_engine';
import { PanZoom } from './pan_zoom';
import type { DrawnMark } from './pass_change';
import { parseSafeSvg } from './safe_svg';
import type { Graph } from './schema';
import { measureSpan } from './user_timing';

export type Side = 'before' | 'after';

const XLINK = 'http://www.w3.org/1999/xlink';
/** Graphviz's own tooltip of each box's link, kept to restore when its change line goes. */
const plainTooltips = new WeakMap<Element, string>();

/** Puts `line` under a box's Graphviz tooltip (its <a xlink:title>; set as an attribute, never markup); null restores it. */
function setChangeTooltip(element: Element, line: string | null): void {
  const link = element.querySelector('a');
  if (!link) {
    return;
  }
  if (!plainTooltips.has(link)) {
    plainTooltips.set(link, link.getAttributeNS(XLINK, 'title') ?? '');
  }
  const plain = plainTooltips.get(link)!;
  link.setAttributeNS(XLINK, 'xlink:title', line ? `${plain}\n${line}` : plain);
}

export interface GraphPaneCallbacks {
  onHover(side: Side, displayedId: string | null): void;
  onClick(side: Side, displayedId: string): void;
}

function naturalHeight(svg: SVGSVGElement): number {
  const height = svg.getAttribute('height') ?? '';
  const value = parseFloat(height);
  if (!Number.isFinite(value)) {
    return 0;
  }
  return height.endsWith('pt') ? (value * 4) / 3 : value;
}

export class GraphPane {
  readonly node: HTMLElement;
  readonly canvas: HTMLElement;
  private readonly caption: HTMLElement;
  private panZoom: PanZoom | null = null;
  private nodeElements = new Map<string, Element>();
  private highlighted = new Map<string, Element[]>();
  private hoveredId: string | null = null;
  private renderToken = 0;
  /** Height the drawn graph needs at natural size, in CSS pixels (0 when nothing is drawn). */
  naturalHeightPx = 0;
  /** Milliseconds the last render took (layout + insertion), for the speed check. */
  lastRenderMs = 0;

  constructor(
    readonly side: Side,
    private readonly callbacks: GraphPaneCallbacks,
    /** The view's layouts, shared by its panes (a DOT laid out once serves both). */
    private readonly layouts: LayoutEngine = new LayoutCache()
  ) {
    this.caption = el('div', { className: 'jp-torchfuser-graph-caption' });
    this.canvas = el('div', {
      className: 'jp-torchfuser-graph',
      attrs: { 'data-side': side, 'data-state': 'empty' }
    });
    const zoomButton = (label: string, title: string, action: () => void) => {
      const button = el('button', { className: 'jp-torchfuser-zoom', text: label, attrs: { type: 'button', title } });
      button.addEventListener('click', action);
      return button;
    };
    const toolbar = el('div', { className: 'jp-torchfuser-graph-toolbar' }, [
      this.caption,
      zoomButton('+', 'Zoom in (or Ctrl + wheel)', () => this.panZoom?.zoomBy(1.25)),
      zoomButton('−', 'Zoom out (or Ctrl + wheel)', () => this.panZoom?.zoomBy(0.8)),
      zoomButton('Fit', 'Show the whole graph', () => this.panZoom?.fit())
    ]);
    this.node = el('div', { className: 'jp-torchfuser-graph-column' }, [toolbar, this.canvas]);
    this.canvas.addEventListener('pointerover', this.onPointerOver);
    this.canvas.addEventListener('pointerleave', () => this.setHovered(null));
    this.canvas.addEventListener('click', this.onClick);
  }

  /** Sets the pane height (the view gives both panes the same one). */
  setHeight(px: number): void {
    this.canvas.style.height = `${Math.round(px)}px`;
  }

  setCaption(text: string): void {
    this.caption.textContent = text;
  }

  /** Draws `display` (or shows `message` when there is no graph). Resolves when drawn. */
  async render(graph: Graph | null, display: DisplayGraph | null, message: string): Promise<void> {
    const token = ++this.renderToken;
    const started = performance.now();
    this.nodeElements = new Map();
    this.highlighted = new Map();
    this.hoveredId = null;
    this.panZoom?.dispose();
    this.panZoom = null;
    this.naturalHeightPx = 0;
    if (!graph || !display) {
      this.showMessage(message, 'empty');
      return;
    }
    this.showMessage(`Laying out ${graph.nodes.length} nodes…`, 'loading');
    let svg: SVGSVGElement;
    try {
      const layoutStarted = performance.now();
      const svgText = await this.layouts.renderSvg(display.dot);
      const parseStarted = performance.now();
      if (token !== this.renderToken) {
        return;
      }
      svg = parseSafeSvg(svgText, this.canvas.ownerDocument);
      // User-timing entries let a harness see where the time goes; they cost nothing otherwise.
      measureSpan(`torchfuser:layout:${this.side}`, layoutStarted, parseStarted);
      measureSpan(`torchfuser:parse:${this.side}`, parseStarted, performance.now());
    } catch (error) {
      if (token === this.renderToken) {
        this.showMessage(`Could not draw this graph: ${String((error as Error)?.message ?? error)}`, 'error');
      }
      return;
    }
    const insertStarted = performance.now();
    this.naturalHeightPx = naturalHeight(svg);
    this.tagNodes(svg, graph, display);
    clear(this.canvas);
    this.canvas.appendChild(svg);
    this.canvas.setAttribute('data-state', 'drawn');
    this.panZoom = new PanZoom(svg);
    measureSpan(`torchfuser:insert:${this.side}`, insertStarted, performance.now());
    this.lastRenderMs = performance.now() - started;
  }

  private showMessage(text: string, state: string): void {
    clear(this.canvas);
    this.canvas.setAttribute('data-state', state);
    this.canvas.appendChild(el('div', { className: 'jp-torchfuser-graph-message', text }));
  }

  /** data-node-id on every node group; ids removed so they cannot clash with the page's. */
  private tagNodes(svg: SVGSVGElement, graph: Graph, display: DisplayGraph): void {
    const kernelIds = new Set(graph.nodes.filter(n => n.kernel).map(n => n.id));
    for (const group of Array.from(svg.querySelectorAll('g, a'))) {
      if (group.classList.contains('node')) {
        const title = group.querySelector('title')?.textContent ?? '';
        const id = group.getAttribute('id') || title;
        group.setAttribute('data-node-id', id);
        this.nodeElements.set(id, group);
        if (kernelIds.has(id)) {
          group.classList.add(KERNEL_CLASS);
        }
        if (display.members.has(id)) {
          group.classList.add(MODULE_CLASS);
        }
      }
      group.removeAttribute('id');
    }
  }

  /** Fills a node's shape with `color` (already a plain, checked colour value). */
  paintNode(displayedId: string, color: string): void {
    const element = this.nodeElements.get(displayedId);
    if (!element) {
      return;
    }
    element.classList.add('jp-torchfuser-covered');
    for (const shape of Array.from(element.querySelectorAll('path, polygon, ellipse'))) {
      if (shape.getAttribute('fill') !== 'none') {
        shape.setAttribute('fill', color);
      }
    }
  }

  /**
   * data-change on the drawn nodes in `changes` (what the selected pass did to
   * them); cleared elsewhere. A module box also gets data-change-count and a
   * tooltip line: it is all that is drawn of the nodes that changed inside.
   */
  markChanges(changes: Map<string, DrawnMark>): void {
    for (const [id, element] of this.nodeElements) {
      const mark = changes.get(id);
      if (mark) {
        element.setAttribute('data-change', mark.change);
      } else {
        element.removeAttribute('data-change');
      }
      if (mark?.inside) {
        element.setAttribute('data-change-count', String(mark.inside));
      } else {
        element.removeAttribute('data-change-count');
      }
      if (element.classList.contains(MODULE_CLASS)) {
        setChangeTooltip(element, mark?.title ?? null);
      }
    }
  }

  nodeElement(displayedId: string): Element | undefined {
    return this.nodeElements.get(displayedId);
  }

  get drawnNodeIds(): string[] {
    return [...this.nodeElements.keys()];
  }

  /** Puts `className` on exactly the nodes in `ids` (clearing it elsewhere). */
  setHighlight(className: string, ids: Iterable<string>): number {
    for (const element of this.highlighted.get(className) ?? []) {
      element.classList.remove(className);
    }
    const elements: Element[] = [];
    for (const id of ids) {
      const element = this.nodeElements.get(id);
      if (element) {
        element.classList.add(className);
        elements.push(element);
      }
    }
    this.highlighted.set(className, elements);
    return elements.length;
  }

  /** Dims every non-matching node while a search is active. */
  setSearching(active: boolean): void {
    this.canvas.classList.toggle('jp-torchfuser-searching', active);
  }

  /** Centre of a drawn node in SVG user units (null when it is not drawn or cannot be measured). */
  private nodeCentre(displayedId: string): { x: number; y: number } | null {
    const element = this.nodeElements.get(displayedId) as SVGGraphicsElement | undefined;
    if (!element || !this.panZoom || typeof element.getBBox !== 'function') {
      return null;
    }
    const box = element.getBBox();
    // Graphviz puts everything under a translated <g class="graph">.
    const graphGroup = element.closest('g.graph') as SVGGraphicsElement | null;
    const matrix = graphGroup?.transform?.baseVal?.consolidate()?.matrix;
    const dx = matrix ? matrix.e : 0;
    const dy = matrix ? matrix.f : 0;
    return { x: box.x + box.width / 2 + dx, y: box.y + box.height / 2 + dy };
  }

  /** Pans so that the node is in the middle, unless it is already in view. */
  reveal(displayedId: string): void {
    const centre = this.nodeCentre(displayedId);
    if (centre && this.panZoom && !this.panZoom.shows(centre.x, centre.y)) {
      this.panZoom.centerOn(centre.x, centre.y);
    }
  }

  /** Centres the node, zooming in to natural size first if the graph is shown smaller (search). */
  focus(displayedId: string): void {
    const centre = this.nodeCentre(displayedId);
    if (centre && this.panZoom) {
      this.panZoom.focusOn(centre.x, centre.y);
      this.canvas.setAttribute('data-focus', displayedId);
    }
  }

  private readonly onPointerOver = (event: Event) => {
    const group = (event.target as Element | null)?.closest?.('g.node');
    this.setHovered(group?.getAttribute('data-node-id') ?? null);
  };

  private setHovered(id: string | null): void {
    if (id !== this.hoveredId) {
      this.hoveredId = id;
      this.callbacks.onHover(this.side, id);
    }
  }

  private readonly onClick = (event: Event) => {
    if (this.panZoom?.dragged) {
      this.panZoom.dragged = false;
      return;
    }
    const group = (event.target as Element | null)?.closest?.('g.node');
    const id = group?.getAttribute('data-node-id');
    if (id) {
      this.callbacks.onClick(this.side, id);
    }
  };
}
