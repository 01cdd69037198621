// Bundles the CLI for bin/warren: one file per load path instead of ~150 modules, which each
// cost a resolve, a read and a compile at every start (docs/cli.md, "Start-up"). Commands
// that need the daemon or MCP packages import them on use; those stay outside the bundle and
// resolve from node_modules as usual, and so do code-split chunks loaded on demand (doctor).
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const here = fileURLToPath(new URL('.', import.meta.url));
rmSync(`${here}dist/bundle`, { recursive: true, force: true });
await build({
  entryPoints: [`${here}dist/main.js`],
  outdir: `${here}dist/bundle`,
  bundle: true,
  splitting: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  external: ['@warren/daemon', '@warren/mcp'],
  // commander is CommonJS: its require() of node builtins needs a real require in ESM output.
  banner: { js: "import { createRequire as __warrenCreateRequire } from 'node:module'; const require = __warrenCreateRequire(import.meta.url);" },
  minify: false,
  logLevel: 'warning',
});
