/**
 * The committed wire types are generated from report.schema.json: regenerate
 * in memory and compare, so a schema change cannot leave them stale.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generateReportTypes, OUTPUT_PATH, SCHEMA_PATH } from '../../scripts/report-types.mjs';

describe('generated report types', () => {
  it('match report.schema.json (else run `jlpm build:types` in labextension/ and commit the result)', () => {
    const expected = generateReportTypes(readFileSync(SCHEMA_PATH, 'utf8'));
    const committed = readFileSync(OUTPUT_PATH, 'utf8');
    if (committed !== expected) {
      throw new Error(
        'src/generated/report_types.ts differs from what torchfuser/report/report.schema.json generates: ' +
          'run `jlpm build:types` in labextension/ and commit src/generated/report_types.ts'
      );
    }
  });

  it('cover every $def with a Wire-prefixed type and keep descriptions as comments', () => {
    const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8'));
    const text = generateReportTypes(JSON.stringify(schema));
    for (const name of Object.keys(schema.$defs)) {
      expect(text).toMatch(new RegExp(`export (interface|type) Wire${name}\\b`));
    }
    expect(text).toContain('export interface WireBundle');
    expect(text).toContain('/** index into the report\'s modules */');
    expect(text).toContain('export type WireModule = [string, string];');
    expect(text).toContain('cache: "hit" | "miss" | "disk";');
  });

  it('refuse schema keywords they do not understand', () => {
    const schema = { title: 'Bundle', type: 'object', properties: { a: { type: 'string', pattern: '^x' } } };
    expect(() => generateReportTypes(JSON.stringify(schema))).toThrow(/unsupported keyword "pattern"/);
  });
});
