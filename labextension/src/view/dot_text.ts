/**
 * Small helpers for DOT text: quoting for the graphs this view writes itself
 * (collapsed modules), and reading node attributes back out of the compiler's
 * DOT so a redrawn graph keeps the compiler's colours.
 */

/** A DOT double-quoted string; backslashes first so escapes stay literal. */
export function dotQuote(text: string): string {
  return (
    '"' +
    String(text)
      .replace(/\\/g, '\\\\')
      .replace(/"/g, '\\"')
      .replace(/\r?\n/g, '\\n') +
    '"'
  );
}

/** Reads one attribute list body (the text between [ and ]) into key → value. */
export function parseAttributeList(body: string): Map<string, string> {
  const attrs = new Map<string, string>();
  const pattern = /\s*([A-Za-z_][\w-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,;\]]+)\s*[,;]?/gy;
  let match: RegExpExecArray | null;
  while ((match = pattern.exec(body)) !== null) {
    if (match[0].length === 0) {
      break;
    }
    let value = match[2];
    if (value.startsWith('"')) {
      value = value.slice(1, -1).replace(/\\(.)/g, '$1');
    }
    attrs.set(match[1], value);
  }
  return attrs;
}

/** Indices of the characters of `dot` outside quoted strings (escaped characters inside them skipped). */
function* unquotedIndices(dot: string): Generator<number> {
  let inString = false;
  for (let i = 0; i < dot.length; i++) {
    const ch = dot[i];
    if (inString) {
      if (ch === '\\') {
        i++;
      } else if (ch === '"') {
        inString = false;
      }
    } else if (ch === '"') {
      inString = true;
    } else {
      yield i;
    }
  }
}

/** Every attribute list in the DOT text, skipping brackets inside quoted strings. */
export function attributeLists(dot: string): string[] {
  const lists: string[] = [];
  let start = -1;
  for (const i of unquotedIndices(dot)) {
    if (dot[i] === '[' && start < 0) {
      start = i + 1;
    } else if (dot[i] === ']' && start >= 0) {
      lists.push(dot.slice(start, i));
      start = -1;
    }
  }
  return lists;
}

/** node id → fillcolor, for node statements that carry both `id` and `fillcolor`. */
export function nodeFillColors(dot: string): Map<string, string> {
  const colors = new Map<string, string>();
  for (const body of attributeLists(dot)) {
    const attrs = parseAttributeList(body);
    const id = attrs.get('id');
    const fill = attrs.get('fillcolor');
    if (id !== undefined && fill !== undefined) {
      colors.set(id, fill);
    }
  }
  return colors;
}

/**
 * Big graphs get a smaller search budget for ranking and crossing reduction:
 * the same drawing rules, a slightly wider picture, 2-3x faster layout.
 */
const SIZE_SETTINGS: [number, string][] = [
  [1500, 'nslimit=0.2; nslimit1=0.2; mclimit=0.1; remincross=false;'],
  [500, 'nslimit=0.5; nslimit1=0.5; mclimit=0.2; remincross=false;']
];

/** Inserts graph attributes right after the opening brace (the compiler's own settings, later, still win). */
export function withGraphAttributes(dot: string, statements: string): string {
  for (const i of unquotedIndices(dot)) {
    if (dot[i] === '{') {
      return `${dot.slice(0, i + 1)} ${statements}${dot.slice(i + 1)}`;
    }
  }
  return dot;
}

export function tunedForSize(dot: string, nodeCount: number): string {
  const tier = SIZE_SETTINGS.find(([above]) => nodeCount > above);
  return tier ? withGraphAttributes(dot, tier[1]) : dot;
}
