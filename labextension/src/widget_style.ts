/**
 * The anywidget bundle carries its own CSS (the build inlines style/base.css),
 * so the Python side only has to ship one file.
 */
declare const __TORCHFUSER_CSS__: string | undefined;

const STYLE_MARKER = 'data-torchfuser-style';

export function injectWidgetStyles(doc: Document): void {
  const css = typeof __TORCHFUSER_CSS__ === 'string' ? __TORCHFUSER_CSS__ : '';
  if (!css || doc.head.querySelector(`style[${STYLE_MARKER}]`)) {
    return;
  }
  const style = doc.createElement('style');
  style.setAttribute(STYLE_MARKER, '');
  style.textContent = css;
  doc.head.appendChild(style);
}
