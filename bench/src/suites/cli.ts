/**
 * CLI start-up: `bin/warren ls` (node start-up, loading the CLI, one request to the daemon,
 * printing the table) against the same run's `node -e 0`, and the unbundled module tree
 * (packages/cli/dist/main.js) for what bundling saves. Interleaved, so load hits all alike.
 *
 * NODE_EXTRA_CA_CERTS makes every node process read and parse that bundle before any user
 * code runs (~40 ms for Debian's full bundle on the 2-core machine, the same for `node -e 0`).
 * Where the bench's environment sets it, both are also measured without it: what a machine
 * that does not set it gets, and what the target is judged on.
 *
 * Phases: the bundle run again with a preload (PHASES, a CommonJS file written to the run's
 * temp dir) that notes performance.now(), ms since the process started, when node hands over
 * to user code, when the CLI sends its request, when the answer has arrived and at exit: node's
 * own start, loading and parsing the CLI, the request, printing and exit.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO } from '@warren/tests/harness';
import type { Context } from '../context.js';

const SUITE = 'cli';

const PHASES = `'use strict';
const { performance } = require('node:perf_hooks');
const http = require('node:http');
const t = { start: performance.now() };
const request = http.request;
http.request = function (...args) {
  t.request ??= performance.now();
  return request.apply(this, args).on('response', (res) => res.on('end', () => (t.answer ??= performance.now())));
};
process.on('exit', () => process.stderr.write('phases ' + JSON.stringify({ ...t, exit: performance.now() }) + '\\n'));
`;

interface Phases {
  start: number;
  request: number;
  answer: number;
  exit: number;
}

function phases(argv: string[], env: NodeJS.ProcessEnv): Promise<Phases> {
  const [command = '', ...args] = argv;
  return new Promise((resolve, reject) => {
    const c = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let stderr = '';
    c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('error', reject);
    c.on('exit', (code) => {
      const line = /^phases (.*)$/m.exec(stderr)?.[1];
      if (code !== 0 || line === undefined) reject(new Error(`${argv.join(' ')} exited ${code}: ${stderr}`));
      else resolve(JSON.parse(line) as Phases);
    });
  });
}

function timed(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const [command = '', ...args] = argv;
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const c = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    let stderr = '';
    c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('error', reject);
    c.on('exit', (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${argv.join(' ')} exited ${code}: ${stderr}`))));
  });
}

export async function runCli(ctx: Context): Promise<void> {
  const n = ctx.iters.cli;
  const d = await ctx.getDaemon();
  const env: NodeJS.ProcessEnv = { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey };
  // Something to list, as a user would have.
  const { kill } = await ctx.sandbox();
  const bin = path.join(REPO, 'bin/warren');
  const tree = path.join(REPO, 'packages/cli/dist/main.js');
  const node: number[] = [];
  const ls: number[] = [];
  const lsTree: number[] = [];
  const extraCa = env.NODE_EXTRA_CA_CERTS;
  const plain = { ...env };
  delete plain.NODE_EXTRA_CA_CERTS;
  const nodePlain: number[] = [];
  const lsPlain: number[] = [];
  for (let i = 0; i < 3; i++) await timed([bin, 'ls'], env); // page cache warm
  for (let i = 0; i < n; i++) {
    node.push(await timed([process.execPath, '-e', '0'], env));
    ls.push(await timed([bin, 'ls'], env));
    lsTree.push(await timed([process.execPath, tree, 'ls'], env));
    if (extraCa === undefined) continue;
    nodePlain.push(await timed([process.execPath, '-e', '0'], plain));
    lsPlain.push(await timed([bin, 'ls'], plain));
  }
  // Where the time goes, from inside the process (without NODE_EXTRA_CA_CERTS, as judged).
  const preload = path.join(ctx.tmp('cli'), 'phases.cjs');
  writeFileSync(preload, PHASES);
  const bundle = path.join(REPO, 'packages/cli/dist/bundle/main.cjs');
  const split: Phases[] = [];
  for (let i = 0; i < n; i++) split.push(await phases([process.execPath, '-r', preload, bundle, 'ls'], plain));
  await kill();
  const r = ctx.report;
  const phase = (key: string, label: string, values: number[]) =>
    r.add({ key: `cli-phase-${key}`, suite: SUITE, label: `phase: ${label}`, unit: 'ms', values });
  phase(
    'node',
    'node start to user code',
    split.map((p) => p.start),
  );
  phase(
    'load',
    'loading the CLI to its request',
    split.map((p) => p.request - p.start),
  );
  phase(
    'request',
    'the request, sent to answered',
    split.map((p) => p.answer - p.request),
  );
  phase(
    'print',
    'printing to exit',
    split.map((p) => p.exit - p.answer),
  );
  const withCa = extraCa === undefined ? '' : ` (NODE_EXTRA_CA_CERTS=${extraCa})`;
  r.add({ key: 'cli-node', suite: SUITE, label: `node -e 0${withCa}`, unit: 'ms', values: node, isBaseline: true });
  r.add({ key: 'cli-ls', suite: SUITE, label: `bin/warren ls (bundled CLI, 1 sandbox)${withCa}`, unit: 'ms', values: ls, baseline: 'cli-node' });
  r.add({ key: 'cli-ls-tree', suite: SUITE, label: 'node packages/cli/dist/main.js ls (module tree)', unit: 'ms', values: lsTree, baseline: 'cli-node' });
  let judged = 'cli-ls';
  let baseline = 'cli-node';
  if (extraCa !== undefined) {
    r.add({ key: 'cli-node-plain', suite: SUITE, label: 'node -e 0 (NODE_EXTRA_CA_CERTS unset)', unit: 'ms', values: nodePlain, isBaseline: true });
    r.add({ key: 'cli-ls-plain', suite: SUITE, label: 'bin/warren ls (NODE_EXTRA_CA_CERTS unset)', unit: 'ms', values: lsPlain, baseline: 'cli-node-plain' });
    judged = 'cli-ls-plain';
    baseline = 'cli-node-plain';
  }
  const v = r.p50(judged);
  r.target(
    `warren ls p50 ≤ 150 ms (quiet machine${extraCa === undefined ? '' : ', NODE_EXTRA_CA_CERTS unset'})`,
    v <= 150,
    `${v.toFixed(0)} ms, node -e 0 ${r.p50(baseline).toFixed(0)} ms`,
  );
}
