/** The `warren` command line against a real daemon. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startDaemon, stopAndCheckClean, REPO, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
let scratch: string;
before(async () => {
  d = await startDaemon();
  scratch = mkdtempSync(path.join(tmpdir(), 'warren-cli-'));
});
after(async () => {
  rmSync(scratch, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

function warren(...args: string[]): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(path.join(REPO, 'bin/warren'), args, {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey },
    timeout: 120_000,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

test('create, ls, info, exec, cp, rm', () => {
  const created = warren('create', '--metadata', 'suite=cli', '--ttl', '600', '--json');
  assert.equal(created.code, 0, created.stderr);
  const id = (JSON.parse(created.stdout) as { id: string }).id;
  assert.match(id, /^sb-/);

  const plain = warren('create', '--metadata', 'suite=cli');
  assert.equal(plain.code, 0, plain.stderr);
  const id2 = plain.stdout.trim();
  assert.match(id2, /^sb-[a-z0-9]+$/);

  const ls = warren('ls', '--metadata', 'suite=cli');
  assert.match(ls.stdout, new RegExp(id));
  assert.match(ls.stdout, new RegExp(id2));
  const lsJson = JSON.parse(warren('ls', '--json', '--metadata', 'suite=cli').stdout) as Array<{ id: string }>;
  assert.deepEqual(lsJson.map((s) => s.id).sort(), [id, id2].sort());

  const info = warren('info', id);
  assert.match(info.stdout, /state\s+running/);
  assert.match(info.stdout, /metadata\s+suite=cli/);
  assert.equal((JSON.parse(warren('info', id, '--json').stdout) as { id: string }).id, id);

  const ex = warren('exec', id, '--', 'bash', '-c', 'echo out; echo err >&2; exit 7');
  assert.equal(ex.code, 7);
  assert.equal(ex.stdout, 'out\n');
  assert.equal(ex.stderr, 'err\n');
  assert.equal(warren('exec', id, '--user', 'root', '--', 'id', '-u').stdout, '0\n');
  assert.equal(warren('exec', id, '--cwd', '/etc', '--env', 'X=1', '--', 'bash', '-c', 'echo $PWD $X').stdout, '/etc 1\n');
  const slow = warren('exec', id, '--timeout', '1', '--', 'bash', '-c', 'echo started; sleep 30');
  assert.equal(slow.code, 124);
  assert.equal(slow.stdout, 'started\n');
  assert.match(slow.stderr, /timed out/);

  const local = path.join(scratch, 'blob.bin');
  const bytes = randomBytes(300_000);
  writeFileSync(local, bytes);
  const up = warren('cp', local, `${id}:blob.bin`);
  assert.equal(up.code, 0, up.stderr);
  assert.equal(warren('exec', id, '--', 'stat', '-c', '%s', '/home/user/blob.bin').stdout, '300000\n');
  const back = path.join(scratch, 'back.bin');
  assert.equal(warren('cp', `${id}:/home/user/blob.bin`, back).code, 0);
  assert.ok(readFileSync(back).equals(bytes), 'round trip is byte-exact');
  const missing = warren('cp', `${id}:/nope`, back);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /no such file/);

  const rm = warren('rm', id, id2);
  assert.equal(rm.code, 0, rm.stderr);
  const gone = warren('info', id);
  assert.equal(gone.code, 2);
  assert.match(gone.stderr, /no sandbox with id/);
});

test('bad input gets a clear message and a non-zero exit', () => {
  const badTtl = warren('create', '--ttl', 'soon');
  assert.notEqual(badTtl.code, 0);
  assert.match(badTtl.stderr, /--ttl must be a positive integer/);
  const badTemplate = warren('create', '--template', 'nope');
  assert.equal(badTemplate.code, 2);
  assert.match(badTemplate.stderr, /unknown template 'nope'; available: .*base/);
  const noKey = spawnSync(path.join(REPO, 'bin/warren'), ['ls'], {
    encoding: 'utf8',
    env: { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: 'wk_wrong' },
  });
  assert.notEqual(noKey.status, 0);
  assert.match(noKey.stderr, /invalid API key/);
});

test('--version prints the version of the CLI package, bundled or not', () => {
  const { version } = JSON.parse(readFileSync(path.join(REPO, 'packages/cli/package.json'), 'utf8')) as { version: string };
  for (const argv of [
    [path.join(REPO, 'bin/warren'), '--version'],
    [process.execPath, path.join(REPO, 'packages/cli/dist/main.js'), '-V'],
  ]) {
    const [command = '', ...args] = argv;
    const r = spawnSync(command, args, { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), version, argv.join(' '));
  }
});

test('doctor checks the host and the daemon', () => {
  const r = warren('doctor');
  assert.match(r.stdout, /ok\s+runsc: runsc version/);
  assert.match(r.stdout, /ok\s+daemon: http:\/\/127\.0\.0\.1:\d+ version/);
  assert.match(r.stdout, /ok\s+template base: built/);
  assert.equal(r.code, r.stdout.includes('FAIL') ? 1 : 0, 'exit status follows the checks');
});
