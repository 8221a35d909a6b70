/**
 * Pan and zoom an SVG by rewriting its viewBox. Ctrl/⌘ + wheel zooms at the
 * pointer (a plain wheel keeps scrolling the notebook); dragging pans; a
 * small drag threshold keeps node clicks working.
 */

interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

const DRAG_THRESHOLD_PX = 4;
/** Graphviz measures in points: at natural size one user unit is 4/3 CSS pixels. */
const PX_PER_UNIT_AT_NATURAL_SIZE = 4 / 3;

export class PanZoom {
  private readonly graphBox: Box;
  private initial: Box;
  private box: Box;
  private touched = false;
  private readonly resizeObserver: ResizeObserver | null = null;
  private dragStart: { x: number; y: number; box: Box } | null = null;
  /** True right after a drag, so the click that ends it is not a node click. */
  dragged = false;

  constructor(private readonly svg: SVGSVGElement) {
    this.graphBox = readViewBox(svg);
    this.initial = { ...this.graphBox };
    this.box = { ...this.initial };
    svg.removeAttribute('width');
    svg.removeAttribute('height');
    svg.setAttribute('preserveAspectRatio', 'xMidYMid meet');
    this.apply();
    // Small graphs would otherwise be blown up to fill the pane.
    if (typeof ResizeObserver !== 'undefined') {
      this.resizeObserver = new ResizeObserver(() => this.fitWithoutUpscaling());
      this.resizeObserver.observe(svg);
    }
    svg.addEventListener('wheel', this.onWheel, { passive: false });
    svg.addEventListener('pointerdown', this.onPointerDown);
    svg.addEventListener('pointermove', this.onPointerMove);
    svg.addEventListener('pointerup', this.onPointerUp);
    svg.addEventListener('pointercancel', this.onPointerUp);
  }

  get scale(): number {
    return this.initial.w / this.box.w;
  }

  zoomBy(factor: number, centerX = 0.5, centerY = 0.5): void {
    this.touched = true;
    const w = this.box.w / factor;
    const h = this.box.h / factor;
    this.box = {
      x: this.box.x + (this.box.w - w) * centerX,
      y: this.box.y + (this.box.h - h) * centerY,
      w,
      h
    };
    this.apply();
  }

  fit(): void {
    this.touched = false;
    this.box = { ...this.initial };
    this.apply();
  }

  dispose(): void {
    this.resizeObserver?.disconnect();
  }

  /** The whole graph, but never larger than its natural size; kept until the user pans or zooms. */
  private fitWithoutUpscaling(): void {
    const rect = this.svg.getBoundingClientRect();
    if (!rect.width || !rect.height) {
      return;
    }
    const g = this.graphBox;
    const w = Math.max(g.w, rect.width / PX_PER_UNIT_AT_NATURAL_SIZE);
    const h = Math.max(g.h, rect.height / PX_PER_UNIT_AT_NATURAL_SIZE);
    // Keep the top of the graph at the top: graphs read downwards.
    this.initial = { x: g.x - (w - g.w) / 2, y: g.y, w, h };
    if (!this.touched) {
      this.box = { ...this.initial };
      this.apply();
    }
  }

  /** True when the point (SVG user units) is inside the visible area, with a small margin. */
  shows(x: number, y: number): boolean {
    const margin = 0.05;
    const { x: bx, y: by, w, h } = this.box;
    return x > bx + w * margin && x < bx + w * (1 - margin) && y > by + h * margin && y < by + h * (1 - margin);
  }

  /** Centre the view on a point in SVG user units, keeping the zoom. */
  centerOn(x: number, y: number): void {
    this.touched = true;
    this.box = { ...this.box, x: x - this.box.w / 2, y: y - this.box.h / 2 };
    this.apply();
  }

  /**
   * Centre on a point, zoomed in to at least natural size (one unit = 4/3 CSS
   * pixels): a search match in a big graph is then readable, not a speck.
   */
  focusOn(x: number, y: number): void {
    const rect = this.svg.getBoundingClientRect();
    let { w, h } = this.box;
    if (rect.width > 0 && rect.height > 0) {
      const naturalW = rect.width / PX_PER_UNIT_AT_NATURAL_SIZE;
      const naturalH = rect.height / PX_PER_UNIT_AT_NATURAL_SIZE;
      if (w > naturalW * 1.001 || h > naturalH * 1.001) {
        w = naturalW;
        h = naturalH;
      }
    }
    this.touched = true;
    this.box = { x: x - w / 2, y: y - h / 2, w, h };
    this.apply();
  }

  private apply(): void {
    const { x, y, w, h } = this.box;
    this.svg.setAttribute('viewBox', `${x} ${y} ${w} ${h}`);
  }

  private readonly onWheel = (event: WheelEvent) => {
    if (!event.ctrlKey && !event.metaKey) {
      return;
    }
    event.preventDefault();
    const rect = this.svg.getBoundingClientRect();
    const cx = rect.width ? (event.clientX - rect.left) / rect.width : 0.5;
    const cy = rect.height ? (event.clientY - rect.top) / rect.height : 0.5;
    this.zoomBy(event.deltaY < 0 ? 1.2 : 1 / 1.2, cx, cy);
  };

  private readonly onPointerDown = (event: PointerEvent) => {
    if (event.button !== 0) {
      return;
    }
    this.dragged = false;
    this.dragStart = { x: event.clientX, y: event.clientY, box: { ...this.box } };
  };

  private readonly onPointerMove = (event: PointerEvent) => {
    if (!this.dragStart) {
      return;
    }
    const dx = event.clientX - this.dragStart.x;
    const dy = event.clientY - this.dragStart.y;
    if (!this.dragged && Math.hypot(dx, dy) < DRAG_THRESHOLD_PX) {
      return;
    }
    if (!this.dragged) {
      this.dragged = true;
      this.touched = true;
      this.svg.setPointerCapture?.(event.pointerId);
    }
    const rect = this.svg.getBoundingClientRect();
    // One screen pixel in user units; "meet" scales by the tighter axis.
    const unit = Math.max(this.box.w / (rect.width || 1), this.box.h / (rect.height || 1));
    this.box = { ...this.dragStart.box, x: this.dragStart.box.x - dx * unit, y: this.dragStart.box.y - dy * unit };
    this.apply();
  };

  private readonly onPointerUp = (event: PointerEvent) => {
    if (this.dragged) {
      this.svg.releasePointerCapture?.(event.pointerId);
    }
    this.dragStart = null;
  };
}

function readViewBox(svg: SVGSVGElement): Box {
  const parts = (svg.getAttribute('viewBox') ?? '').trim().split(/[\s,]+/).map(Number);
  if (parts.length === 4 && parts.every(Number.isFinite) && parts[2] > 0 && parts[3] > 0) {
    return { x: parts[0], y: parts[1], w: parts[2], h: parts[3] };
  }
  const w = parseFloat(svg.getAttribute('width') ?? '') || 100;
  const h = parseFloat(svg.getAttribute('height') ?? '') || 100;
  return { x: 0, y: 0, w, h };
}
