/**
 * Above the graphs: the search box and the module list (collapse / expand by
 * module, collapse everything at one nesting level, expand all).
 */
import { collapseLevels, type ModuleEntry } from './collapse';
import { clear, el } from './dom';

export interface GraphToolbarHandlers {
  onSearch(query: string, reveal: boolean): void;
  onCollapse(path: string, collapsed: boolean): void;
  onCollapseLevel(depth: number): void;
  onExpandAll(): void;
}

const MAX_LISTED_MODULES = 400;
const SEARCH_DEBOUNCE_MS = 120;

export class GraphToolbar {
  readonly node: HTMLElement;
  readonly searchInput: HTMLInputElement;
  private readonly matchCount: HTMLElement;
  private readonly moduleList: HTMLElement;
  private readonly moduleSummary: HTMLElement;
  private readonly levelSelect: HTMLSelectElement;
  private searchTimer: ReturnType<typeof setTimeout> | null = null;
  /** The module entries the list shows now. */
  private listed: ModuleEntry[] | null = null;

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
        if (this.searchTimer) {
          clearTimeout(this.searchTimer); // Enter searches now; the pending keystroke search is the same query
          this.searchTimer = null;
        }
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
    this.levelSelect = el('select', { className: 'jp-torchfuser-collapse-level', attrs: { 'aria-label': 'collapse every module at a nesting level' } });
    this.levelSelect.addEventListener('change', () => {
      if (this.levelSelect.value !== '') {
        this.handlers.onCollapseLevel(Number(this.levelSelect.value));
      }
    });
    const expandAll = el('button', { className: 'jp-torchfuser-expand-all', text: 'Expand all', attrs: { type: 'button' } });
    expandAll.addEventListener('click', () => {
      this.levelSelect.value = '';
      this.handlers.onExpandAll();
    });
    const modules = el('details', { className: 'jp-torchfuser-modules' }, [
      this.moduleSummary,
      el('div', { className: 'jp-torchfuser-module-actions' }, [this.levelSelect, expandAll]),
      this.moduleList
    ]);
    this.node = el('div', { className: 'jp-torchfuser-toolbar' }, [
      this.searchInput,
      this.matchCount,
      modules,
      el('span', { className: 'jp-torchfuser-hint', text: 'drag to pan · Ctrl + wheel to zoom · hover to match nodes' })
    ]);
  }

  private setSummary(entries: ModuleEntry[], collapsed: Set<string>, level: number | null): void {
    if (level !== null) {
      this.levelSelect.value = String(level);
    } else if (!collapsed.size) {
      this.levelSelect.value = '';
    }
    this.moduleSummary.textContent = `Modules (${entries.length})${collapsed.size ? `, ${collapsed.size} collapsed` : ''}`;
  }

  setMatchCount(before: number, after: number, active: boolean): void {
    this.matchCount.textContent = active ? `${before} before · ${after} after` : '';
  }

  /** `level`: the depth the view collapsed to by itself (a big graph shown first), else null. */
  setModules(entries: ModuleEntry[], collapsed: Set<string>, level: number | null = null): void {
    if (entries === this.listed) {
      // The same graph's modules (entries are kept per graph): only the check marks change.
      this.moduleList.querySelectorAll<HTMLInputElement>('input[data-module]').forEach(input => {
        input.checked = collapsed.has(input.getAttribute('data-module') ?? '');
      });
      this.setSummary(entries, collapsed, level);
      return;
    }
    this.listed = entries;
    clear(this.moduleList);
    const chosen = this.levelSelect.value;
    clear(this.levelSelect);
    this.levelSelect.appendChild(el('option', { text: 'Collapse level…', attrs: { value: '' } }));
    for (const level of collapseLevels(entries)) {
      const label = `level ${level.depth + 1}: ${level.count} module${level.count === 1 ? '' : 's'} (${level.example}${level.count > 1 ? ', …' : ''})`;
      this.levelSelect.appendChild(el('option', { text: label, attrs: { value: level.depth } }));
    }
    this.levelSelect.value = chosen;
    this.setSummary(entries, collapsed, level);
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
