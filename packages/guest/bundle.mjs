// Builds what the daemon mounts read-only into sandboxes: the guest agent bundled into one
// file, and warren-init and warren-pty, linked statically so it runs on any template's root filesystem.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
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
execFileSync('gcc', ['-O2', '-Wall', '-Wextra', '-Werror', '-static', '-o', `${here}dist/warren-init`, `${here}native/init.c`], { stdio: 'inherit' });
// warren-pty: runs a command on a pseudo-terminal for the agent's terminals (node has no PTY API).
execFileSync('gcc', ['-O2', '-Wall', '-Wextra', '-Werror', '-static', '-o', `${here}dist/warren-pty`, `${here}native/pty.c`], { stdio: 'inherit' });
