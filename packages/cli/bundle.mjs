// Bundles the CLI for bin/warren: one file per load path instead of ~150 modules, which each
// cost a resolve, a read and a compile at every start (docs/cli.md, "Start-up"). CommonJS, not
// ESM: an ESM entry makes node set up its ESM loader (resolve, translate, module jobs), about
// 10 ms of a one-shot command measured on the 2-core machine; CommonJS loads through the
// loader node has already started. Commands that need the daemon or MCP packages import them
// on use; those stay outside the bundle and resolve from node_modules as usual, and so does
// doctor (dist/doctor.js, the module tree beside the bundle): an import() bundled into
// CommonJS would wrap its modules in lazy initialisers, which esbuild cannot tree-shake, and
// zod (about 800 KB) would come back into the file every command loads.
import { build } from 'esbuild';
import { readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const here = fileURLToPath(new URL('.', import.meta.url));
rmSync(`${here}dist/bundle`, { recursive: true, force: true });
const onUse = {
  name: 'doctor-on-use',
  setup(b) {
    // dist/main.js's './doctor.js' seen from dist/bundle/main.cjs.
    b.onResolve({ filter: /^\.\/doctor\.js$/ }, () => ({ path: '../doctor.js', external: true }));
  },
};
const version = JSON.parse(readFileSync(`${here}package.json`, 'utf8')).version;
// version.ts reads package.json; in the bundle the version is a constant instead.
const versionInline = {
  name: 'version-inline',
  setup(b) {
    b.onResolve({ filter: /^\.\/version\.js$/ }, () => ({ path: 'version', namespace: 'warren-version' }));
    b.onLoad({ filter: /.*/, namespace: 'warren-version' }, () => ({
      contents: `export function cliVersion() { return ${JSON.stringify(version)}; }`,
      loader: 'js',
    }));
  },
};
await build({
  entryPoints: [`${here}dist/main.js`],
  outfile: `${here}dist/bundle/main.cjs`,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  // ws: loaded by the SDK only when a terminal opens (warren shell), from node_modules.
  external: ['@warren/daemon', '@warren/mcp', 'ws'],
  plugins: [onUse, versionInline],
  minify: false,
  logLevel: 'warning',
});
