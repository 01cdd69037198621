#!/usr/bin/env node
// E2B's own JS SDK tests (packages/js-sdk/tests of an e2b-dev/E2B checkout) against a fresh
// warren daemon, with the official `e2b` package this repository pins standing in for the
// SDK's source. A compatibility report, not part of `npm test`: it needs that checkout and
// vitest 4, neither of which the project installs. See README.md here.
//
//   node tests/e2b-sdk/run.mjs E2B_CHECKOUT VITEST_BIN [GLOB,...]
//
// Run as root after `npm run build`. Prints vitest's report; exits with vitest's status.
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDaemon, stopAndCheckClean } from '../dist/harness.js';

const [checkout, vitest, globs = 'tests/sandbox/**/*.test.ts,tests/api/*.test.ts'] = process.argv.slice(2);
if (!checkout || !vitest) {
  console.error('usage: node tests/e2b-sdk/run.mjs E2B_CHECKOUT VITEST_BIN [GLOB,...]');
  process.exit(2);
}
const tests = path.join(checkout, 'packages/js-sdk/tests');
if (!existsSync(tests)) throw new Error(`no ${tests}: give the path of an e2b-dev/E2B checkout`);
if (!existsSync(vitest)) throw new Error(`no vitest at ${vitest}: install vitest 4 (5 needs Node 22) somewhere and give its bin/vitest`);
const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../node_modules/e2b/dist/index.mjs');
if (!existsSync(sdk)) throw new Error('node_modules/e2b is missing: run npm install (it is a devDependency of tests)');

const work = mkdtempSync(path.join(tmpdir(), 'e2b-sdk-tests-'));
cpSync(tests, path.join(work, 'tests'), { recursive: true });
// Their imports of the SDK's entry point ('../src', '../../src/index.js') are the package.
writeFileSync(
  path.join(work, 'vitest.config.mjs'),
  `export default {
  resolve: { alias: [{ find: /^(\\.\\.\\/)+src(\\/index(\\.js)?)?$/, replacement: ${JSON.stringify(sdk)} }] },
  test: { include: ${JSON.stringify(globs.split(','))}, fileParallelism: false, maxConcurrency: 1, testTimeout: 60000, hookTimeout: 60000, environment: 'node' },
};
`,
);
const d = await startDaemon();
let status = 1;
try {
  const env = { ...process.env, E2B_API_URL: `${d.url}/e2b`, E2B_SANDBOX_URL: `${d.url}/e2b/envd`, E2B_API_KEY: d.apiKey, E2B_VALIDATE_API_KEY: 'false' };
  delete env.E2B_DEBUG;
  delete env.E2B_DOMAIN;
  status = spawnSync(vitest, ['run', '--reporter=verbose'], { cwd: work, env, stdio: 'inherit', timeout: 3_600_000 }).status ?? 1;
} finally {
  await stopAndCheckClean(d);
  rmSync(work, { recursive: true, force: true });
}
process.exit(status);
