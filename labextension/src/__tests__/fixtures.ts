/**
 * Test fixtures: report files, and a Graphviz stand-in that turns each DOT node
 * statement into the SVG shape Graphviz emits (g.node with id, class, title),
 * so view wiring is tested without WebAssembly.
 */
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach } from 'vitest';
import { join } from 'node:path';
import { attributeLists, parseAttributeList } from '../view/dot_text';
import { ExplorerView, type ViewHost } from '../view/explorer_view';
import { setLayoutEngine, type LayoutEngine } from '../view/layout_engine';

export function loadFixture(name: string): any {
  return JSON.parse(readFileSync(join(__dirname, '../../test/fixtures', name), 'utf8'));
}

/** The repository's shared fixtures (tests/fixtures), written by the Python side. */
export const REPO_FIXTURES = join(__dirname, '../../../tests/fixtures');

export function loadRepoFixture(name: string): any {
  return JSON.parse(readFileSync(join(REPO_FIXTURES, name), 'utf8'));
}

function xml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

export const stubGraphviz: LayoutEngine & { calls: string[] } = {
  calls: [],
  async renderSvg(dot: string): Promise<string> {
    stubGraphviz.calls.push(dot);
    const groups: string[] = [];
    let y = 0;
    for (const body of attributeLists(dot)) {
      const attrs = parseAttributeList(body);
      const id = attrs.get('id');
      if (id === undefined) {
        continue;
      }
      const cls = ['node', attrs.get('class')].filter(Boolean).join(' ');
      groups.push(
        `<g id="${xml(id)}" class="${xml(cls)}"><title>${xml(id)}</title>` +
          `<g id="a_${xml(id)}"><a xlink:title="${xml(attrs.get('tooltip') ?? '')}">` +
          `<polygon fill="${xml(attrs.get('fillcolor') ?? 'white')}" stroke="black" points="0,${y} 80,${y} 80,${y + 20} 0,${y + 20}"/>` +
          `<text x="4" y="${y + 14}">${xml(attrs.get('label') ?? id)}</text></a></g></g>`
      );
      y += 30;
    }
    return (
      `<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n` +
      `<svg width="100pt" height="${y}pt" viewBox="0.00 0.00 100.00 ${y}.00" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">` +
      `<g id="graph0" class="graph" transform="translate(4 ${y})"><title>G</title>${groups.join('')}</g></svg>`
    );
  }
};

/** An explorer view in the document, drawn from `bundle`. */
export async function mountView(bundle: unknown, host: ViewHost = { interactive: false }): Promise<ExplorerView> {
  const view = new ExplorerView(host);
  document.body.appendChild(view.node);
  view.setBundle(bundle);
  await view.whenDrawn();
  return view;
}

/** A report string that would run script if it were ever injected as HTML (it sets window.__x). */
export const HOSTILE = '<img src=x onerror="window.__x=1">';

declare global {
  interface Window {
    __x?: number;
  }
}

/** Every test of the file lays out with the stub, starts with no injected-script mark and leaves no DOM. */
export function useStubbedLayout(): void {
  beforeEach(() => {
    setLayoutEngine(stubGraphviz);
    delete window.__x;
  });
  afterEach(() => {
    document.body.innerHTML = '';
    setLayoutEngine(null);
  });
}
