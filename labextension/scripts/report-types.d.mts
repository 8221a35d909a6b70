// Types for scripts/report-types.mjs, so the drift test can import the generator.
export const SCHEMA_PATH: string;
export const OUTPUT_PATH: string;
export const PREFIX: string;
export function generateReportTypes(schemaText: string): string;
