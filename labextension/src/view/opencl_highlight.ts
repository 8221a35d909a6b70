/**
 * A small OpenCL C tokenizer for highlighting. Output is text nodes inside
 * <span class="jp-torchfuser-tok-*">, never markup built from the source.
 */

export type TokenKind = 'comment' | 'string' | 'preprocessor' | 'number' | 'keyword' | 'type' | 'builtin' | 'plain';

export interface Token {
  kind: TokenKind;
  text: string;
}

const KEYWORDS = new Set([
  '__kernel', 'kernel', '__global', 'global', '__local', 'local', '__constant', 'constant',
  '__private', 'private', 'restrict', 'const', 'volatile', 'static', 'inline', 'if', 'else',
  'for', 'while', 'do', 'return', 'break', 'continue', 'switch', 'case', 'default', 'struct',
  'typedef', 'sizeof', '__attribute__', 'reqd_work_group_size'
]);

const TYPES = new Set([
  'void', 'bool', 'char', 'uchar', 'short', 'ushort', 'int', 'uint', 'long', 'ulong', 'float',
  'double', 'half', 'size_t', 'ptrdiff_t', 'intptr_t', 'uintptr_t', 'unsigned', 'signed'
]);

const VECTOR_TYPE = /^(char|uchar|short|ushort|int|uint|long|ulong|float|double|half)(2|3|4|8|16)$/;

const BUILTINS = new Set([
  'get_global_id', 'get_local_id', 'get_group_id', 'get_global_size', 'get_local_size',
  'get_num_groups', 'barrier', 'mem_fence', 'CLK_LOCAL_MEM_FENCE', 'CLK_GLOBAL_MEM_FENCE',
  'exp', 'log', 'sqrt', 'rsqrt', 'tanh', 'fabs', 'fmax', 'fmin', 'max', 'min', 'mad', 'fma',
  'pow', 'erf', 'sin', 'cos', 'native_exp', 'native_log', 'native_recip', 'vload4', 'vstore4',
  'vload8', 'vstore8', 'vload16', 'vstore16', 'select', 'clamp', 'INFINITY', 'NAN'
]);

// Order matters: comments and strings before anything that could start inside them. An unclosed
// block comment runs to the end of the source ((?![\s\S]): with the m flag, $ would end it at the line's end).
const TOKEN_PATTERN = new RegExp(
  [
    '(?<comment>//[^\\n]*|/\\*[\\s\\S]*?(?:\\*/|(?![\\s\\S])))',
    '(?<string>"(?:[^"\\\\\\n]|\\\\.)*"?|\'(?:[^\'\\\\\\n]|\\\\.)*\'?)',
    '(?<preprocessor>^[ \\t]*#[^\\n]*)',
    '(?<number>0[xX][0-9a-fA-F.]+(?:[pP][+-]?\\d+)?[fFuUlL]*|(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+-]?\\d+)?[fFuUlLhH]*)',
    '(?<word>[A-Za-z_]\\w*)',
    '(?<other>\\s+|.)'
  ].join('|'),
  'gmy'
);

function classifyWord(word: string): TokenKind {
  if (KEYWORDS.has(word)) {
    return 'keyword';
  }
  if (TYPES.has(word) || VECTOR_TYPE.test(word)) {
    return 'type';
  }
  if (BUILTINS.has(word)) {
    return 'builtin';
  }
  return 'plain';
}

export function tokenizeOpenCL(source: string): Token[] {
  const tokens: Token[] = [];
  const push = (kind: TokenKind, text: string) => {
    const last = tokens[tokens.length - 1];
    if (last && last.kind === kind && kind === 'plain') {
      last.text += text; // fewer spans for punctuation and spaces
    } else {
      tokens.push({ kind, text });
    }
  };
  TOKEN_PATTERN.lastIndex = 0;
  let match: RegExpExecArray | null;
  while (TOKEN_PATTERN.lastIndex < source.length && (match = TOKEN_PATTERN.exec(source)) !== null) {
    const groups = match.groups ?? {};
    if (groups.comment !== undefined) {
      push('comment', groups.comment);
    } else if (groups.string !== undefined) {
      push('string', groups.string);
    } else if (groups.preprocessor !== undefined) {
      push('preprocessor', groups.preprocessor);
    } else if (groups.number !== undefined) {
      push('number', groups.number);
    } else if (groups.word !== undefined) {
      push(classifyWord(groups.word), groups.word);
    } else {
      push('plain', match[0]);
    }
  }
  return tokens;
}

function tokenNode(kind: TokenKind, text: string, ownerDocument: Document): Node {
  if (kind === 'plain') {
    return ownerDocument.createTextNode(text);
  }
  const span = ownerDocument.createElement('span');
  span.className = `jp-torchfuser-tok-${kind}`;
  span.textContent = text;
  return span;
}

/** Highlighted source as a fragment of spans and text nodes. */
export function highlightOpenCL(source: string, ownerDocument: Document = document): DocumentFragment {
  const fragment = ownerDocument.createDocumentFragment();
  for (const token of tokenizeOpenCL(source)) {
    fragment.appendChild(tokenNode(token.kind, token.text, ownerDocument));
  }
  return fragment;
}

/**
 * Highlighted source, one fragment per line (without its newline; no empty
 * line after a final newline). The whole source is tokenized at once so that
 * a block comment spanning lines stays a comment on each of them.
 */
export function highlightOpenCLLines(source: string, ownerDocument: Document = document): DocumentFragment[] {
  if (!source) {
    return [];
  }
  const lines = [ownerDocument.createDocumentFragment()];
  for (const token of tokenizeOpenCL(source)) {
    token.text.split('\n').forEach((part, i) => {
      if (i > 0) {
        lines.push(ownerDocument.createDocumentFragment());
      }
      if (part) {
        lines[lines.length - 1].appendChild(tokenNode(token.kind, part, ownerDocument));
      }
    });
  }
  if (lines.length > 1 && !lines[lines.length - 1].hasChildNodes()) {
    lines.pop();
  }
  return lines;
}
