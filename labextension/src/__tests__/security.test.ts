/**
 * Report strings are user data. A module named <img src=x onerror=...> must
 * show up as text and never run; SVG from Graphviz is sanitised before use.
 */
import { describe, expect, it } from 'vitest';
import { el } from '../view/dom';
import { ExplorerView } from '../view/explorer_view';
import { highlightOpenCL, tokenizeOpenCL } from '../view/opencl_highlight';
import { parseSafeSvg } from '../view/safe_svg';
import { encodeV2 } from './encode_v2';
import { HOSTILE, loadFixture, useStubbedLayout } from './fixtures';

useStubbedLayout();

describe('hostile report strings', () => {
  it('render as text everywhere and run nothing', async () => {
    const view = new ExplorerView({ interactive: true });
    document.body.appendChild(view.node);
    view.setBundle(loadFixture('hostile_bundle.json'));
    await view.whenDrawn();
    // Exercise every panel that shows module names and source.
    view.search('img', true);
    const kernel = document.querySelector('g.node.jp-torchfuser-kernel[data-node-id="tf_gemm_0"] text')!;
    kernel.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    kernel.dispatchEvent(new Event('pointerover', { bubbles: true }));
    const toggle = document.querySelector(`input.jp-torchfuser-module-toggle[data-module='${HOSTILE}']`) as HTMLInputElement;
    expect(toggle).not.toBeNull();
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change', { bubbles: true }));
    await view.whenDrawn();
    await new Promise(resolve => setTimeout(resolve, 50));

    expect(window.__x).toBeUndefined();
    expect(document.querySelectorAll('img, script, iframe, foreignObject')).toHaveLength(0);
    expect(document.querySelectorAll('[onerror], [onload], [onclick]')).toHaveLength(0);
    expect(document.querySelector('.jp-torchfuser-title')!.textContent).toContain(HOSTILE);
    expect(document.querySelector('.jp-torchfuser-source')!.textContent).toContain(HOSTILE);
    expect(document.querySelector('.jp-torchfuser-module-list')!.textContent).toContain('<img src=x onerror="window');
    expect(document.querySelector('.jp-torchfuser-timing-replay')!.textContent).toContain(HOSTILE); // why no tape
    // The collapsed module box keeps the name as SVG text.
    const box = document.querySelector(`g.node[data-node-id='module:${HOSTILE}']`);
    expect(box).not.toBeNull();
  });

  it('render as text from a schema v2 bundle too (interned module paths, derived DOT)', async () => {
    const view = new ExplorerView({ interactive: false });
    document.body.appendChild(view.node);
    view.setBundle(encodeV2(loadFixture('hostile_bundle.json')));
    await view.whenDrawn();
    const kernel = document.querySelector('g.node.jp-torchfuser-kernel[data-node-id="tf_gemm_0"] text')!;
    kernel.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    view.setCollapsed([HOSTILE]);
    await view.whenDrawn();
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(document.querySelector('.jp-torchfuser-error')!.textContent).toBe('');
    expect(window.__x).toBeUndefined();
    expect(document.querySelectorAll('img, script, iframe, foreignObject')).toHaveLength(0);
    expect(document.querySelectorAll('[onerror], [onload], [onclick]')).toHaveLength(0);
    expect(document.querySelector('.jp-torchfuser-source')!.textContent).toContain(HOSTILE);
    expect(document.querySelector(`g.node[data-node-id='module:${HOSTILE}']`)).not.toBeNull();
  });

  it('the element helper refuses event-handler attributes', () => {
    expect(() => el('div', { attrs: { onclick: 'window.__x=1' } })).toThrow();
    expect(el('div', { text: HOSTILE }).children).toHaveLength(0);
  });

  it('highlighted OpenCL keeps markup-like text as text', () => {
    const fragment = highlightOpenCL(`// ${HOSTILE}\n__kernel void k() { "</pre><script>window.__x=3</script>"; }`);
    const holder = document.createElement('pre');
    holder.appendChild(fragment);
    document.body.appendChild(holder);
    expect(holder.querySelectorAll('img, script')).toHaveLength(0);
    expect(holder.textContent).toContain(HOSTILE);
    expect(window.__x).toBeUndefined();
  });
});

describe('SVG sanitising', () => {
  const evil =
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="window.__x=4" viewBox="0 0 10 10">' +
    '<script>window.__x=5</script>' +
    '<g class="node" id="a" onmouseover="window.__x=6"><title>a</title>' +
    '<a xlink:href="javascript:window.__x=7" href="javascript:window.__x=8" xlink:title="tip"><text>a</text></a></g>' +
    '<foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><img src="x" onerror="window.__x=9"/></div></foreignObject>' +
    '<style>* { display: none }</style>' +
    '</svg>';

  it('strips scripts, handlers, links and foreignObject, keeps the drawing', () => {
    const svg = parseSafeSvg(evil);
    document.body.appendChild(svg);
    expect(svg.querySelectorAll('script, foreignObject, style, img')).toHaveLength(0);
    expect(svg.hasAttribute('onload')).toBe(false);
    expect(svg.querySelector('g.node')!.hasAttribute('onmouseover')).toBe(false);
    const link = svg.querySelector('a')!;
    expect(link.getAttribute('href')).toBeNull();
    expect(link.getAttributeNS('http://www.w3.org/1999/xlink', 'href')).toBeNull();
    expect(link.getAttributeNS('http://www.w3.org/1999/xlink', 'title')).toBe('tip');
    expect(svg.querySelector('text')!.textContent).toBe('a');
    expect(window.__x).toBeUndefined();
  });

  it('rejects text that is not SVG', () => {
    expect(() => parseSafeSvg('<html><body>hi</body></html>')).toThrow();
    expect(() => parseSafeSvg('<svg><g></svg>')).toThrow();
  });
});

describe('OpenCL tokenizer', () => {
  it('classifies keywords, types, builtins, numbers, comments and preprocessor lines', () => {
    const tokens = tokenizeOpenCL('#define N 4\n__kernel void k(__global float4* x) { x[get_global_id(0)] = 0x1.8p+1f; /* c */ }');
    const kinds = (kind: string) => tokens.filter(t => t.kind === kind).map(t => t.text);
    expect(kinds('preprocessor')).toEqual(['#define N 4']);
    expect(kinds('keyword')).toEqual(['__kernel', '__global']);
    expect(kinds('type')).toEqual(['void', 'float4']);
    expect(kinds('builtin')).toEqual(['get_global_id']);
    expect(kinds('number')).toEqual(['0', '0x1.8p+1f']);
    expect(kinds('comment')).toEqual(['/* c */']);
    expect(tokens.map(t => t.text).join('')).toBe('#define N 4\n__kernel void k(__global float4* x) { x[get_global_id(0)] = 0x1.8p+1f; /* c */ }');
  });
});
