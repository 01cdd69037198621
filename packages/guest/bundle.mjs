// Bundles the guest agent into one file that the daemon mounts read-only into sandboxes.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
const here = fileURLToPath(new URL('.', import.meta.url));
await build({
  entryPoints: [`${here}dist/main.js`],
  outfile: `${here}dist/agent.cjs`,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  minify: false,
  logLevel: 'warning',
});
