/**
 * The Python SDK (packages/python) against a real daemon: its unittest suite (unit tests
 * against a fake daemon, end-to-end tests against this one) and the three example programs
 * in examples/python, each run by python3 with WARREN_URL and WARREN_API_KEY of a private
 * daemon and PYTHONPATH on this checkout. The daemon builds templates into its own dir, where
 * `base` and `postgres` are symlinks to the machine's templates (the Python template tests build some).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { Sandbox, Snapshots, Template } from '@warren/sdk';
import { REPO, TEMPLATES, mountsUnder, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const TEST_ROOT = '/var/lib/warren-test';
const PYTHON = process.env.PYTHON ?? 'python3';
let d: DaemonHandle | undefined;
let tpl: string | undefined;

before(async () => {
  requirePython();
  mkdirSync(TEST_ROOT, { recursive: true });
  tpl = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  // The database tests run sandboxes of the machine's postgres template (scripts/setup.sh builds it).
  for (const name of ['base', 'postgres']) {
    if (!existsSync(path.join(TEMPLATES, name, 'current'))) throw new Error(`the ${name} template is not built in ${TEMPLATES}: run bash scripts/setup.sh`);
    symlinkSync(realpathSync(path.join(TEMPLATES, name)), path.join(tpl, name));
  }
  d = await startDaemon({ env: { WARREN_TEMPLATES: tpl } });
});

after(async () => {
  try {
    await stopAndCheckClean(d);
  } finally {
    if (tpl) {
      const mounts = mountsUnder(tpl);
      for (const m of mounts) spawnSync('umount', ['-l', m]);
      rmSync(tpl, { recursive: true, force: true });
      assert.deepEqual(mounts, [], 'overlay mounts left under the templates dir');
    }
  }
});

/** Fails loudly (never skips) without a python3 the SDK supports. */
function requirePython(): void {
  let version: string;
  try {
    version = execFileSync(PYTHON, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error(`${PYTHON} is not installed: run \`bash scripts/setup.sh\` (installs python3)`);
  }
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major < 3 || (major === 3 && minor < 11)) throw new Error(`the Python SDK needs Python 3.11 or newer; ${PYTHON} is ${version}`);
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
  ms: number;
}

/** Runs python3 in the repository with the daemon's URL and key, stdout and stderr interleaved. */
function python(args: string[], timeoutMs: number): Promise<Run> {
  const daemon = d;
  if (!daemon) throw new Error('the daemon did not start');
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, {
      cwd: REPO,
      env: {
        ...process.env,
        WARREN_URL: daemon.url,
        WARREN_API_KEY: daemon.apiKey,
        PYTHONPATH: path.join(REPO, 'packages/python'),
        PYTHONUNBUFFERED: '1',
        PYTHONDONTWRITEBYTECODE: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const keep = (b: Buffer) => {
      output += b.toString();
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    // A hang fails this test with what was printed so far, not the whole suite.
    const timer = setTimeout(() => {
      output += `\n[killed after ${timeoutMs} ms]`;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output, ms: Date.now() - started });
    });
  });
}

function assertPassed(what: string, r: Run): void {
  assert.equal(r.code, 0, `${what} failed (exit ${r.code ?? r.signal}) after ${r.ms} ms:\n${r.output}`);
}

test('python SDK: the unittest suite (unit and end-to-end)', { timeout: 40 * 60_000 }, async (t) => {
  const r = await python(['-m', 'unittest', 'discover', '-s', 'packages/python/tests', '-v'], 35 * 60_000);
  assertPassed('python3 -m unittest discover -s packages/python/tests', r);
  const ran = /^Ran (\d+) tests? in ([\d.]+s)$/m.exec(r.output);
  assert.ok(ran, `no unittest summary in the output:\n${r.output}`);
  assert.ok(Number(ran[1]) >= 90, `only ${ran[1]} Python tests ran:\n${r.output}`);
  assert.match(r.output, /^OK$/m);
  t.diagnostic(`${ran[1]} Python tests in ${ran[2]}`);
});

for (const example of ['shell_tool', 'three_attempts', 'branches']) {
  test(`python example: examples/python/${example}.py`, { timeout: 12 * 60_000 }, async (t) => {
    const r = await python([`examples/python/${example}.py`], 10 * 60_000);
    assertPassed(`examples/python/${example}.py`, r);
    t.diagnostic(`${example}.py: ${r.ms} ms`);
  });
}

test('the Python tests and examples leave no sandbox, snapshot or template behind', async () => {
  const daemon = d;
  assert.ok(daemon);
  assert.deepEqual(
    (await Sandbox.list(daemon.conn)).map((s) => `${s.id} ${JSON.stringify(s.metadata)}`),
    [],
  );
  assert.deepEqual(
    (await Snapshots.list(daemon.conn)).map((s) => s.id),
    [],
  );
  assert.deepEqual((await Template.list(daemon.conn)).map((x) => x.name).sort(), ['base', 'postgres']);
});
