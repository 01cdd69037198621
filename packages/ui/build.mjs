// Builds the dashboard into dist/: index.html, app.js and app.css (xterm.js's stylesheet
// included), which the daemon serves under /ui. Types are checked by `tsc -p packages/ui`
// in `npm run build`; this only bundles.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const here = fileURLToPath(new URL('.', import.meta.url));
rmSync(`${here}dist`, { recursive: true, force: true });
mkdirSync(`${here}dist`);
await build({
  entryPoints: { app: `${here}src/main.tsx` },
  outdir: `${here}dist`,
  bundle: true,
  // The terminal and the usage charts load on first use, from chunks of their own.
  splitting: true,
  chunkNames: 'chunk-[hash]',
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
});
copyFileSync(`${here}src/index.html`, `${here}dist/index.html`);
