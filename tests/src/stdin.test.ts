/**
 * Stdin for commands end to end: `warren exec -i` piping a host tar into the sandbox, binary
 * stdin through the SDK (all 256 byte values, JSON base64 and streamed), a 50 MB stream
 * counted exactly, EOF ending the command, and clear refusals for stdin nobody can take.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { FailedPreconditionError, InvalidArgumentError, type Sandbox } from '@warren/sdk';
import { REPO, startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

// A hang (stdin never closed, a lost credit) must fail one test, not stall the suite.
const T = { timeout: 180_000 };

let d: DaemonHandle;
let sbx: Sandbox;
let host: string;
before(async () => {
  d = await startDaemon();
  sbx = await d.create();
  host = mkdtempSync(path.join(os.tmpdir(), 'warren-stdin-'));
});
after(async () => {
  if (host) rmSync(host, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Runs the CLI with `input` piped to its stdin (a host command's stdout, like a shell pipe). */
function cliWithInput(producer: string[], args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey };
    const source = spawn(producer[0]!, producer.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    const cli = spawn(path.join(REPO, 'bin/warren'), args, { env, stdio: [source.stdout, 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    cli.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    cli.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    cli.on('error', reject);
    cli.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

test('tar c on the host | warren exec -i ID -- tar x: the tree arrives intact', T, async () => {
  const tree = path.join(host, 'tree');
  mkdirSync(path.join(tree, 'sub/deeper'), { recursive: true });
  const files: Record<string, Buffer> = {
    'a.txt': Buffer.from('hello\n'),
    'sub/b.bin': Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7) % 256)),
    'sub/deeper/c.dat': Buffer.alloc(300_000, 0xa5),
  };
  for (const [name, bytes] of Object.entries(files)) writeFileSync(path.join(tree, name), bytes);
  await sbx.exec('mkdir -p /work/x', { user: 'root', check: true });
  const r = await cliWithInput(['tar', 'c', '-C', tree, '.'], ['exec', '-i', sbx.id, '--user', 'root', '--', 'tar', 'x', '-C', '/work/x']);
  assert.equal(r.code, 0, `tar x failed: ${r.stderr}`);
  const sums = await sbx.exec('cd /work/x && sha256sum a.txt sub/b.bin sub/deeper/c.dat', { check: true });
  const expected = Object.entries(files)
    .map(([name, bytes]) => `${sha256(bytes)}  ${name}\n`)
    .join('');
  assert.equal(sums.stdout, expected);
});

test('warren exec -i passes the exit code, and without -i stdin is not read', T, async () => {
  const withI = await cliWithInput(['printf', 'abc'], ['exec', '-i', sbx.id, '--', 'bash', '-c', 'wc -c; exit 3']);
  assert.equal(withI.code, 3);
  assert.equal(withI.stdout.trim(), '3');
  const without = await cliWithInput(['printf', 'abc'], ['exec', sbx.id, '--', 'wc', '-c']);
  assert.equal(without.code, 0);
  assert.equal(without.stdout.trim(), '0');
});

test('warren exec -i is interactive: each line reaches the command before the next is written', T, async () => {
  const env = { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey };
  const script = 'read a; echo "got $a"; read b; echo "got $b"';
  const cli = spawn(path.join(REPO, 'bin/warren'), ['exec', '-i', sbx.id, '--', 'bash', '-c', script], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  let stdout = '';
  const seen = (text: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => stdout.includes(text) && resolve();
      cli.stdout.on('data', (b: Buffer) => {
        stdout += b.toString();
        check();
      });
      cli.on('close', () => reject(new Error(`the CLI ended before printing '${text}': ${stdout}`)));
      check();
    });
  const exited = new Promise<number | null>((resolve) => cli.on('close', resolve));
  try {
    cli.stdin.write('one\n');
    await seen('got one\n'); // the answer to the first line, with stdin still open
    cli.stdin.end('two\n');
    assert.equal(await exited, 0);
    assert.equal(stdout, 'got one\ngot two\n');
  } finally {
    cli.kill();
  }
});

test('binary stdin: all 256 byte values through cat, streamed and as base64 JSON', T, async () => {
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const streamed = await sbx.exec('cat > /tmp/all.bin && sha256sum < /tmp/all.bin', { stdin: all, check: true });
  assert.equal(streamed.stdout, `${sha256(all)}  -\n`);
  assert.deepEqual(await sbx.files.read('/tmp/all.bin'), all);

  const proc = await sbx.exec('sha256sum', { background: true, keepStdinOpen: true });
  await proc.sendStdin(all.subarray(0, 100));
  await proc.sendStdin(all.subarray(100));
  await proc.closeStdin();
  assert.equal((await proc.wait()).stdout, `${sha256(all)}  -\n`);
});

test('a 50 MB stream reaches the command exactly (count and checksum), from a Node stream', T, async () => {
  const total = 50 * 1024 * 1024;
  const hash = createHash('sha256');
  async function* pseudoRandom(): AsyncGenerator<Buffer> {
    let seed = 1;
    for (let sent = 0; sent < total; ) {
      const chunk = Buffer.allocUnsafe(Math.min(1 << 20, total - sent));
      for (let i = 0; i < chunk.length; i += 4) {
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        chunk.writeUInt32LE(seed, i);
      }
      hash.update(chunk);
      sent += chunk.length;
      yield chunk;
    }
  }
  const r = await sbx.exec('tee /tmp/big | wc -c; sha256sum < /tmp/big; rm /tmp/big', { stdin: Readable.from(pseudoRandom()), check: true });
  assert.equal(r.stdout, `${total}\n${hash.digest('hex')}  -\n`);
});

test('stdin from a web ReadableStream and an async iterable; EOF ends the command', T, async () => {
  const web = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode('one\n'));
      c.enqueue(new TextEncoder().encode('two\n'));
      c.close();
    },
  });
  assert.equal((await sbx.exec('wc -l', { stdin: web })).stdout.trim(), '2');
  async function* lines(): AsyncGenerator<Uint8Array> {
    yield Buffer.from('x\n');
    yield Buffer.from('y\n');
  }
  // cat only ends at EOF: this returning at all is the check.
  assert.equal((await sbx.exec('cat', { stdin: lines() })).stdout, 'x\ny\n');
  const bg = await sbx.exec(['cat'], { background: true, stdin: Buffer.from('bg\n') });
  assert.equal((await bg.wait()).stdout, 'bg\n');
});

test('a command that exits without reading all of its stdin returns its own result', T, async () => {
  const r = await sbx.exec('head -c 5', { stdin: Buffer.alloc(40 * 1024 * 1024, 0x41) });
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'AAAAA');
});

test('stdin to an exited process is a clear 409, and bad stdin requests are 400s', T, async () => {
  const done = await sbx.exec(['true'], { background: true, keepStdinOpen: true });
  await eventually(async () => (await done.wait()).exitCode === 0 || undefined, 30_000, 'true to exit');
  await assert.rejects(done.writeStdin(Buffer.from('late')), (err: Error) => err instanceof FailedPreconditionError && /exited/.test(err.message));
  await assert.rejects(done.sendStdin('late'), FailedPreconditionError);

  const closed = await sbx.exec(['sleep', '30'], { background: true });
  await assert.rejects(closed.writeStdin('x'), (err: Error) => err instanceof FailedPreconditionError && /stdin .* is closed/.test(err.message));
  await closed.kill();

  const open = await sbx.exec(['cat'], { background: true, keepStdinOpen: true });
  await assert.rejects(
    d.http.json('POST', `/v1/sandboxes/${sbx.id}/processes/${open.pid}/stdin`, { json: { data: 'not base64!', encoding: 'base64' } }),
    InvalidArgumentError,
  );
  await assert.rejects(d.http.json('POST', `/v1/sandboxes/${sbx.id}/exec`, { json: { cmd: 'cat', keepStdinOpen: true } }), InvalidArgumentError);
  // Streamed without closing, then closed by a second, empty stream.
  assert.equal(await open.writeStdin('kept', { close: false }), 4);
  assert.equal(await open.writeStdin(new Uint8Array(0)), 0);
  assert.equal((await open.wait()).stdout, 'kept');
});

test('a stdin body cut short (the client went away) closes stdin: the command sees EOF', T, async () => {
  const proc = await sbx.exec(['cat'], { background: true, keepStdinOpen: true });
  const url = new URL(`${d.url}/v1/sandboxes/${sbx.id}/processes/${proc.pid}/stdin`);
  const req = http.request(url, { method: 'PUT', headers: { authorization: `Bearer ${d.apiKey}`, 'transfer-encoding': 'chunked' } });
  req.on('error', () => undefined); // destroyed below on purpose
  req.write('a'.repeat(1000));
  try {
    // The bytes go on before the body ends (a command may answer each line before the next
    // comes): once cat has echoed them they went all the way. Then the client dies mid-body.
    await eventually(async () => (await proc.output()).stdout.length === 1000 || undefined, 30_000, 'cat to echo the first bytes');
  } finally {
    req.destroy();
  }
  const r = await proc.wait();
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'a'.repeat(1000));
});

test('the daemon keeps no copy of a streamed stdin: its memory stays flat over 50 MB', T, async () => {
  // Measured, not timed: a daemon that buffered the body would grow by about its size.
  const before = d.rss();
  const r = await sbx.exec('wc -c', {
    stdin: Readable.from(
      (function* () {
        for (let i = 0; i < 50; i++) yield Buffer.alloc(1 << 20, i);
      })(),
    ),
  });
  assert.equal(r.stdout.trim(), String(50 << 20));
  const grown = d.rss() - before;
  assert.ok(grown < 40 * 1024 * 1024, `daemon grew by ${(grown / 1e6).toFixed(1)} MB during a 50 MB stdin`);
});
