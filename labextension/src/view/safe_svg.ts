/**
 * Turns Graphviz SVG text into DOM nodes without ever assigning markup.
 * Graphviz escapes user labels itself; this is the second line of defence:
 * parse as XML, drop anything that can run code or embed HTML, then adopt.
 */

const FORBIDDEN_ELEMENTS = new Set([
  'script',
  'foreignobject',
  'iframe',
  'object',
  'embed',
  'style',
  'handler',
  'listener'
]);

function isDangerousAttribute(name: string, value: string): boolean {
  const lower = name.toLowerCase();
  if (lower.startsWith('on')) {
    return true;
  }
  // Graphviz only emits links for URL/href attributes, which the compiler does not set.
  if (lower === 'href' || lower === 'xlink:href' || lower.endsWith(':href')) {
    return true;
  }
  return /^\s*(javascript|data|vbscript):/i.test(value) && lower !== 'xlink:title';
}

/**
 * Removes forbidden elements and attributes in place. One flat pass over the
 * elements, reading attribute names as strings (no Attr objects): several
 * times faster on a big drawing than walking `attributes` recursively.
 */
export function sanitizeSvgTree(root: Element): void {
  const doomed: Element[] = [];
  for (const element of [root, ...Array.from(root.getElementsByTagName('*'))]) {
    if (FORBIDDEN_ELEMENTS.has(element.localName.toLowerCase())) {
      doomed.push(element); // its descendants go with it
      continue;
    }
    for (const name of element.getAttributeNames()) {
      if (isDangerousAttribute(name, element.getAttribute(name) ?? '')) {
        element.removeAttribute(name);
      }
    }
  }
  for (const element of doomed) {
    element.remove();
  }
}

/** Parses SVG text into a sanitised <svg> element owned by `ownerDocument`. */
export function parseSafeSvg(svgText: string, ownerDocument: Document = document): SVGSVGElement {
  const parsed = new DOMParser().parseFromString(svgText, 'image/svg+xml');
  const root = parsed.documentElement;
  if (!root || root.localName !== 'svg' || parsed.getElementsByTagName('parsererror').length > 0) {
    throw new Error('Graphviz returned something that is not SVG');
  }
  // Clean before the nodes ever belong to the live document; adopting moves them without a copy.
  sanitizeSvgTree(root);
  return ownerDocument.adoptNode(root) as unknown as SVGSVGElement;
}
