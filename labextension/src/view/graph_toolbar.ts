/**
 * Above the graphs: the search box and the module list (collapse / expand by
 * module, plus collapse-all and expand-all).
 */
import type { ModuleEntry } from './collapse';
import { clear, el } from './dom';

export interface GraphToolbarHandlers {
  onSearch(query: string, reveal: boolean): void;
  onCollapse(path: string, collapsed: boolean): void;
  onCollapseAll(collapsed: boolean): void;
}

const MAX_LISTED_MODULES = 400;
const SEARCH_DEBOUNCE_MS = 120;

export class GraphToolbar {
  readonly node: HTMLElement;
  readonly searchInput: HTMLInputElement;
  private readonly matchCount: HTMLElement;
  private readonly moduleList: HTMLElement;
  private readonly moduleSummary: HTMLElement;
  private searchTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly handlers: GraphToolbarHandlers) {
    this.searchInput = el('input', {
      className: 'jp-torchfuser-search',
      attrs: { type: 'search', placeholder: 'Search op or module…', 'aria-label': 'search nodes by op or module' }
    });
    this.searchInput.addEventListener('input', () => {
      if (this.searchTimer) {
        clearTimeout(this.searchTimer);
      }
      this.searchTimer = setTimeout(() => this.handlers.onSearch(this.searchInput.value, false), SEARCH_DEBOUNCE_MS);
    });
    this.searchInput.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        this.handlers.onSearch(this.searchInput.value, true);
      }
    });
    this.matchCount = el('span', { className: 'jp-torchfuser-match-count' });
    this.moduleSummary = el('summary', { text: 'Modules' });
    this.moduleList = el('ul', { className: 'jp-torchfuser-module-list' });
    this.moduleList.addEventListener('change', event => {
      const input = event.target as HTMLInputElement;
      const path = input.getAttribute?.('data-module');
      if (path !== null && path !== undefined) {
        this.handlers.onCollapse(path, input.checked);
      }
    });
    const allButton = (label: string, collapsed: boolean) => {
      const button = el('button', { className: 'jp-torchfuser-collapse-all', text: label, attrs: { type: 'button', 'data-collapse': collapsed } });
      button.addEventListener('click', () => this.handlers.onCollapseAll(collapsed));
      return button;
    };
    const modules = el('details', { className: 'jp-torchfuser-modules' }, [
      this.moduleSummary,
      el('div', { className: 'jp-torchfuser-module-actions' }, [allButton('Collapse all', true), allButton('Expand all', false)]),
      this.moduleList
    ]);
    this.node = el('div', { className: 'jp-torchfuser-toolbar' }, [
      this.searchInput,
      this.matchCount,
      modules,
      el('span', { className: 'jp-torchfuser-hint', text: 'drag to pan · Ctrl + wheel to zoom · hover to match nodes' })
    ]);
  }

  setMatchCount(before: number, after: number, active: boolean): void {
    this.matchCount.textContent = active ? `${before} before · ${after} after` : '';
  }

  setModules(entries: ModuleEntry[], collapsed: Set<string>): void {
    clear(this.moduleList);
    this.moduleSummary.textContent = `Modules (${entries.length})${collapsed.size ? `, ${collapsed.size} collapsed` : ''}`;
    for (const entry of entries.slice(0, MAX_LISTED_MODULES)) {
      const checkbox = el('input', {
        className: 'jp-torchfuser-module-toggle',
        attrs: { type: 'checkbox', 'data-module': entry.path, 'aria-label': `collapse ${entry.path}` }
      });
      checkbox.checked = collapsed.has(entry.path);
      const label = el('label', {}, [
        checkbox,
        el('span', { text: entry.path.split('.').pop() ?? entry.path, attrs: { title: entry.path } }),
        el('span', { className: 'jp-torchfuser-module-meta', text: ` ${entry.moduleType} · ${entry.nodeIds.length}` })
      ]);
      const item = el('li', { attrs: { 'data-module': entry.path } }, [label]);
      item.style.paddingLeft = `${entry.depth}em`;
      this.moduleList.appendChild(item);
    }
    if (entries.length > MAX_LISTED_MODULES) {
      this.moduleList.appendChild(el('li', { text: `… ${entries.length - MAX_LISTED_MODULES} more (use Collapse all)` }));
    }
  }
}
