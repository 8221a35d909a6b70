// TypeScript types for the report's JSON, generated from its one definition,
// torchfuser/report/report.schema.json. Every $def becomes `Wire<Name>` (the
// root, titled Bundle, becomes WireBundle), so the view's own types never clash.
//
//   node scripts/report-types.mjs          writes src/generated/report_types.ts
//   node scripts/report-types.mjs --check  fails when that file is out of date
//
// Only the JSON Schema subset the report uses is understood; anything else is
// an error, so a schema change cannot silently produce a looser type.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const SCHEMA_PATH = resolve(root, '../torchfuser/report/report.schema.json');
export const OUTPUT_PATH = resolve(root, 'src/generated/report_types.ts');
export const PREFIX = 'Wire';

// Keywords that only constrain values (not their TypeScript shape) or only document.
const IGNORED = new Set(['$schema', '$id', 'title', 'description', 'minimum', 'minItems', 'maxItems', '$defs',
  'propertyNames']);
const SHAPING = new Set([
  'type', 'const', 'enum', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems', 'anyOf', '$ref'
]);

function fail(where, message) {
  throw new Error(`report-types: ${where}: ${message}`);
}

function checkKeywords(schema, where) {
  for (const key of Object.keys(schema)) {
    if (!IGNORED.has(key) && !SHAPING.has(key)) {
      fail(where, `unsupported keyword "${key}"`);
    }
  }
}

/** A JSDoc block; `*\/` inside a description must not end the comment. */
function docComment(text, indent) {
  if (!text) {
    return '';
  }
  const lines = String(text).replace(/\*\//g, '*\\/').split('\n');
  if (lines.length === 1) {
    return `${indent}/** ${lines[0]} */\n`;
  }
  return `${indent}/**\n${lines.map(line => `${indent} * ${line}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

function refName(ref, where) {
  const match = /^#\/\$defs\/([A-Za-z_][A-Za-z0-9_]*)$/.exec(ref);
  if (!match) {
    fail(where, `only local "#/$defs/Name" references are supported, not ${JSON.stringify(ref)}`);
  }
  return PREFIX + match[1];
}

const PRIMITIVES = { string: 'string', integer: 'number', number: 'number', boolean: 'boolean', null: 'null' };

function union(parts) {
  const unique = [...new Set(parts)];
  return unique.length === 1 ? unique[0] : unique.join(' | ');
}

/** Parenthesised where needed as an array element type. */
function element(type) {
  return /[|&]/.test(type) ? `(${type})` : type;
}

function propertyKey(name) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : JSON.stringify(name);
}

function objectType(schema, where, indent) {
  const properties = schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  for (const name of required) {
    if (!(name in properties) && schema.additionalProperties === false) {
      fail(where, `required "${name}" is not a property`);
    }
  }
  const extra = schema.additionalProperties;
  const names = Object.keys(properties);
  if (names.length === 0) {
    if (extra === undefined || extra === true) {
      return 'Record<string, unknown>';
    }
    if (extra === false) {
      return 'Record<string, never>';
    }
    return `Record<string, ${typeOf(extra, `${where}.additionalProperties`, indent)}>`;
  }
  const inner = indent + '  ';
  const lines = names.map(name => {
    const property = properties[name];
    const optional = required.has(name) ? '' : '?';
    const type = typeOf(property, `${where}.${name}`, inner);
    return `${docComment(property.description, inner)}${inner}${propertyKey(name)}${optional}: ${type};`;
  });
  if (extra !== undefined && extra !== false && extra !== true) {
    fail(where, 'properties together with an additionalProperties schema are not supported');
  }
  return `{\n${lines.join('\n')}\n${indent}}`;
}

function arrayType(schema, where, indent) {
  if (schema.prefixItems) {
    if (schema.items !== false) {
      fail(where, 'prefixItems need "items": false (a fixed tuple)');
    }
    const required = schema.minItems ?? 0;
    const parts = schema.prefixItems.map((item, i) => {
      const type = typeOf(item, `${where}[${i}]`, indent);
      return i < required ? type : `${element(type)}?`;
    });
    return `[${parts.join(', ')}]`;
  }
  if (schema.items === undefined || schema.items === true) {
    return 'unknown[]';
  }
  return `${element(typeOf(schema.items, `${where}[]`, indent))}[]`;
}

function typeOf(schema, where, indent = '') {
  if (schema === true) {
    return 'unknown';
  }
  if (typeof schema !== 'object' || schema === null) {
    fail(where, 'a schema must be an object');
  }
  checkKeywords(schema, where);
  if (schema.$ref !== undefined) {
    const others = Object.keys(schema).filter(key => SHAPING.has(key) && key !== '$ref');
    if (others.length) {
      fail(where, `$ref beside ${others.join(', ')} is not supported`);
    }
    return refName(schema.$ref, where);
  }
  if (schema.const !== undefined) {
    return JSON.stringify(schema.const);
  }
  if (schema.enum !== undefined) {
    return union(schema.enum.map(value => JSON.stringify(value)));
  }
  if (schema.anyOf !== undefined) {
    return union(schema.anyOf.map((part, i) => typeOf(part, `${where}.anyOf[${i}]`, indent)));
  }
  const types = Array.isArray(schema.type) ? schema.type : schema.type === undefined ? [] : [schema.type];
  if (types.length === 0) {
    fail(where, 'no type, const, enum, anyOf or $ref');
  }
  return union(
    types.map(type => {
      if (type === 'object') {
        return objectType(schema, where, indent);
      }
      if (type === 'array') {
        return arrayType(schema, where, indent);
      }
      if (!(type in PRIMITIVES)) {
        fail(where, `unknown type "${type}"`);
      }
      return PRIMITIVES[type];
    })
  );
}

function declaration(name, schema, where) {
  const doc = docComment(schema.description, '');
  const type = typeOf(schema, where);
  const isInterface = schema.type === 'object' && Object.keys(schema.properties ?? {}).length > 0;
  return isInterface ? `${doc}export interface ${name} ${type}\n` : `${doc}export type ${name} = ${type};\n`;
}

/** The generated module's text for the schema's JSON text. */
export function generateReportTypes(schemaText) {
  const schema = JSON.parse(schemaText);
  const rootName = PREFIX + (schema.title ?? 'Root');
  const parts = [
    '// Generated by scripts/report-types.mjs from torchfuser/report/report.schema.json; do not edit.\n' +
      '// Regenerate with `jlpm build:types` (cd labextension) after changing the schema.\n',
    declaration(rootName, schema, rootName)
  ];
  for (const [name, definition] of Object.entries(schema.$defs ?? {})) {
    if (PREFIX + name === rootName) {
      fail(name, `clashes with the root type ${rootName}`);
    }
    parts.push(declaration(PREFIX + name, definition, name));
  }
  return parts.join('\n');
}

function main() {
  const text = generateReportTypes(readFileSync(SCHEMA_PATH, 'utf8'));
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(OUTPUT_PATH, 'utf8');
    } catch {
      // missing counts as out of date
    }
    if (current !== text) {
      console.error('src/generated/report_types.ts is out of date: run `jlpm build:types` in labextension/');
      process.exit(1);
    }
    return;
  }
  mkdirSync(dirname(OUTPUT_PATH), { recursive: true });
  let previous = '';
  try {
    previous = readFileSync(OUTPUT_PATH, 'utf8');
  } catch {
    // first run
  }
  if (previous !== text) {
    writeFileSync(OUTPUT_PATH, text);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main();
}
