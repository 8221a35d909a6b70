/**
 * The only way this view creates elements. Text goes in through textContent and
 * attributes through setAttribute, so report strings can never become markup.
 */

export interface ElementOptions {
  className?: string;
  text?: string;
  attrs?: Record<string, string | number | boolean | null | undefined>;
}

type Child = Node | string | null | undefined | false;

function setSafeAttribute(element: Element, name: string, value: string): void {
  // Event-handler attributes would run report text as script.
  if (/^on/i.test(name)) {
    throw new Error(`refusing to set event-handler attribute ${name}`);
  }
  element.setAttribute(name, value);
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  options: ElementOptions = {},
  children: Child[] = []
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (options.className) {
    element.className = options.className;
  }
  if (options.text !== undefined) {
    element.textContent = options.text;
  }
  for (const [name, value] of Object.entries(options.attrs ?? {})) {
    if (value === null || value === undefined || value === false) {
      continue;
    }
    setSafeAttribute(element, name, value === true ? '' : String(value));
  }
  appendChildren(element, children);
  return element;
}

export function appendChildren(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    parent.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
}

export function clear(element: Element): void {
  while (element.firstChild) {
    element.removeChild(element.firstChild);
  }
}

/**
 * Calls `handler` with the element matching `selector` (inside `container`)
 * that was clicked, or focused when Enter or Space was pressed: for rows drawn
 * as role=button, one listener for all of them.
 */
export function onActivate(container: Element, selector: string, handler: (target: Element) => void): void {
  const target = (event: Event) => {
    const found = (event.target as Element | null)?.closest?.(selector);
    return found && container.contains(found) ? found : null;
  };
  container.addEventListener('click', event => {
    const found = target(event);
    if (found) {
      handler(found);
    }
  });
  container.addEventListener('keydown', event => {
    const key = (event as KeyboardEvent).key;
    const found = key === 'Enter' || key === ' ' ? target(event) : null;
    if (found) {
      event.preventDefault(); // Space would scroll; other controls in the container keep their keys
      handler(found);
    }
  });
}
