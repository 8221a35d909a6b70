// Builds the anywidget ESM (one self-contained file: view, CSS and Graphviz wasm)
// into ../explorer/static/widget.js, where explorer/widget.py reads it.
import { build } from 'esbuild';
import { readFile, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');
const outfile = process.env.TORCHFUSER_WIDGET_OUT ?? resolve(root, '../explorer/static/widget.js');
const production = process.argv.includes('--dev') ? false : true;

const css = await readFile(resolve(root, 'style/base.css'), 'utf8');
await mkdir(dirname(outfile), { recursive: true });
const result = await build({
  entryPoints: [resolve(root, 'src/widget.ts')],
  outfile,
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2020'],
  minify: production,
  sourcemap: false,
  legalComments: 'none',
  define: { __TORCHFUSER_CSS__: JSON.stringify(css) },
  metafile: true,
  logLevel: 'warning'
});
const bytes = Object.values(result.metafile.outputs).reduce((sum, o) => sum + o.bytes, 0);
console.log(`widget ESM: ${outfile} (${(bytes / 1024).toFixed(0)} KiB)`);
