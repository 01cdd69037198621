/**
 * Files through the API and SDK against real sandboxes: read/write (text, binary, large
 * streams), ownership and modes, list/stat/exists/mkdir/move/remove, permissions, error
 * codes, and that uploads are atomic and stream with bounded daemon memory.
 */
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { Readable } from 'node:stream';
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, WarrenError, type Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

const HOME = '/home/user';
const MiB = 1024 * 1024;

let d: DaemonHandle;
/** Shared by every test in this file (creating one costs ~0.6 s); diskMB allows the 1 GiB upload. */
let sbx: Sandbox;

before(async () => {
  d = await startDaemon();
  sbx = await d.create({ resources: { diskMB: 4096 }, ttlSeconds: 3600 });
});
after(async () => {
  await stopAndCheckClean(d);
});

/** The error a call fails with; fails the test if the call succeeds. */
async function failure(p: Promise<unknown>): Promise<WarrenError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof WarrenError, `expected a WarrenError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the call to fail');
}

/** Asserts that a call fails with the given SDK error class; returns the error. */
async function failsWith(p: Promise<unknown>, cls: new (...args: never[]) => WarrenError): Promise<WarrenError> {
  const err = await failure(p);
  assert.ok(err instanceof cls, `expected ${cls.name}, got ${err.constructor.name}: ${err.message}`);
  return err;
}

async function sh(cmd: string, user?: string): Promise<string> {
  const r = await sbx.exec(cmd, { user, timeoutSeconds: 600 });
  assert.equal(r.exitCode, 0, `${cmd} failed: ${r.stderr}`);
  return r.stdout.trim();
}

/** A GET through a given node:http agent, to control which connection carries it. */
function rawGet(agent: http.Agent, route: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer; reusedSocket: boolean }> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${d.url}${route}`, { agent, headers: { authorization: `Bearer ${d.apiKey}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), reusedSocket: req.reusedSocket }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

test('write then read text and binary round trip', async () => {
  const text = 'héllo wörld ✓ 🐇\nline two\n';
  const w = await sbx.files.write(`${HOME}/text.txt`, text);
  assert.deepEqual(w, { size: Buffer.byteLength(text), path: `${HOME}/text.txt` });
  assert.equal(await sbx.files.readText(`${HOME}/text.txt`), text);
  assert.equal(await sh(`cat ${HOME}/text.txt | sha256sum | cut -d' ' -f1`), sha256(text));

  // Every byte value, so nothing on the way treats the body as text.
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await sbx.files.write(`${HOME}/bytes.bin`, all);
  assert.deepEqual(await sbx.files.read(`${HOME}/bytes.bin`), all);
  assert.equal(await sh(`od -An -tx1 -v ${HOME}/bytes.bin | tr -d ' \\n'`), all.toString('hex'));

  // Larger than the stream window and many frames, random so reordering would show.
  const big = randomBytes(5 * MiB);
  const wb = await sbx.files.write(`${HOME}/random.bin`, big);
  assert.equal(wb.size, big.length);
  const back = await sbx.files.read(`${HOME}/random.bin`);
  assert.equal(back.length, big.length);
  assert.equal(sha256(back), sha256(big));
  assert.equal(await sh(`sha256sum ${HOME}/random.bin | cut -d' ' -f1`), sha256(big));

  // An empty body makes an empty file.
  await sbx.files.write(`${HOME}/empty.txt`, '');
  assert.equal((await sbx.files.stat(`${HOME}/empty.txt`)).size, 0);
  assert.equal((await sbx.files.read(`${HOME}/empty.txt`)).length, 0);
});

test('relative paths resolve against the user home', async () => {
  const w = await sbx.files.write('rel-notes.txt', 'relative\n');
  assert.equal(w.path, `${HOME}/rel-notes.txt`);
  assert.equal(await sh(`cat ${HOME}/rel-notes.txt`), 'relative');
  assert.equal(await sbx.files.readText('rel-notes.txt'), 'relative\n');
  assert.equal(await sbx.files.readText('~/rel-notes.txt'), 'relative\n');
  assert.equal((await sbx.files.stat('rel-notes.txt')).path, `${HOME}/rel-notes.txt`);
  // root's home is /root.
  const r = await sbx.files.write('root-rel.txt', 'r', { user: 'root' });
  assert.equal(r.path, '/root/root-rel.txt');
  assert.equal(await sh('cat /root/root-rel.txt', 'root'), 'r');
});

test('mode option, and overwrite keeps the existing mode and owner', async () => {
  const p = `${HOME}/script.sh`;
  await sbx.files.write(p, '#!/bin/sh\necho one\n', { mode: 0o750 });
  assert.equal((await sbx.files.stat(p)).mode, 0o750);
  assert.equal(await sh(`stat -c %a ${p}`), '750');
  assert.equal(await sh(p), 'one');

  await sbx.files.write(p, '#!/bin/sh\necho two\n');
  assert.equal((await sbx.files.stat(p)).mode, 0o750, 'overwrite without mode keeps 750');
  assert.equal(await sh(p), 'two');

  await sbx.files.write(p, 'secret', { mode: 0o600 });
  assert.equal(await sh(`stat -c %a ${p}`), '600', 'an explicit mode replaces the old one');

  // A new file without mode gets 644.
  await sbx.files.write(`${HOME}/plain.txt`, 'x');
  assert.equal(await sh(`stat -c %a ${HOME}/plain.txt`), '644');

  // root overwriting the user's file leaves it the user's.
  await sbx.files.write(p, 'by root', { user: 'root' });
  assert.equal(await sh(`stat -c '%u %a' ${p}`), '1000 600');

  // A mode that is not octal is refused before anything is written.
  const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files?path=${encodeURIComponent(`${HOME}/badmode.txt`)}&mode=9z`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${d.apiKey}` },
    body: 'x',
  });
  assert.equal(res.status, 400);
  assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'invalid_argument');
  assert.equal(await sbx.files.exists(`${HOME}/badmode.txt`), false);
});

test('a new file belongs to the calling user', async () => {
  const mine = await sbx.files.write(`/tmp/owned-by-user.txt`, 'u');
  assert.equal(mine.path, '/tmp/owned-by-user.txt');
  const st = await sbx.files.stat('/tmp/owned-by-user.txt');
  assert.equal(st.uid, 1000);
  assert.equal(st.gid, 1000);
  assert.equal(await sh('stat -c %u:%g /tmp/owned-by-user.txt'), '1000:1000');

  await sbx.files.write('/tmp/owned-by-root.txt', 'r', { user: 'root' });
  const rst = await sbx.files.stat('/tmp/owned-by-root.txt', { user: 'root' });
  assert.equal(rst.uid, 0);
  assert.equal(rst.gid, 0);
  assert.equal(await sh('stat -c %u:%g /tmp/owned-by-root.txt'), '0:0');
  // The user can read the root file (0644) but not replace it.
  assert.equal(await sbx.files.readText('/tmp/owned-by-root.txt'), 'r');
  await failsWith(sbx.files.write('/tmp/owned-by-root.txt', 'no'), PermissionDeniedError);
});

test('list with depth 1 and 2, stat and exists', async () => {
  const root = `${HOME}/tree`;
  await sbx.files.mkdir(`${root}/sub/deeper`);
  await sbx.files.write(`${root}/a.txt`, 'abc');
  await sbx.files.write(`${root}/sub/b.txt`, 'hello');
  await sbx.files.write(`${root}/sub/deeper/c.txt`, 'seven!!');

  const one = await sbx.files.list(root);
  assert.deepEqual(
    one.map((e) => [e.name, e.type, e.path]),
    [
      ['a.txt', 'file', `${root}/a.txt`],
      ['sub', 'directory', `${root}/sub`],
    ],
  );
  assert.equal(one.find((e) => e.name === 'a.txt')!.size, 3);

  const two = await sbx.files.list(root, { depth: 2 });
  const byPath = new Map(two.map((e) => [e.path, e]));
  assert.deepEqual([...byPath.keys()].sort(), [`${root}/a.txt`, `${root}/sub`, `${root}/sub/b.txt`, `${root}/sub/deeper`].sort());
  assert.equal(byPath.get(`${root}/sub/b.txt`)!.size, 5);
  assert.equal(byPath.get(`${root}/sub/b.txt`)!.type, 'file');
  assert.equal(byPath.get(`${root}/sub/deeper`)!.type, 'directory');

  const three = await sbx.files.list(root, { depth: 3 });
  assert.equal(three.find((e) => e.path === `${root}/sub/deeper/c.txt`)?.size, 7);

  const st = await sbx.files.stat(`${root}/sub/b.txt`);
  assert.equal(st.type, 'file');
  assert.equal(st.name, 'b.txt');
  assert.equal(st.size, 5);
  assert.equal(st.uid, 1000);
  assert.ok(Math.abs(Date.parse(st.mtime) - Date.now()) < 10 * 60_000, `mtime ${st.mtime} is recent`);
  assert.equal((await sbx.files.stat(root)).type, 'directory');

  assert.equal(await sbx.files.exists(`${root}/a.txt`), true);
  assert.equal(await sbx.files.exists(root), true);
  assert.equal(await sbx.files.exists(`${root}/nope.txt`), false);
  assert.equal(await sbx.files.exists('/no/such/dir/at/all'), false);

  // Listing a file is a usage error, not an empty list.
  await failsWith(sbx.files.list(`${root}/a.txt`), InvalidArgumentError);
});

test('mkdir -p of a nested path belongs to the user', async () => {
  const st = await sbx.files.mkdir('mk/a/b/c');
  assert.equal(st.path, `${HOME}/mk/a/b/c`);
  assert.equal(st.type, 'directory');
  assert.equal(st.uid, 1000);
  assert.equal(await sh(`stat -c %u ${HOME}/mk ${HOME}/mk/a ${HOME}/mk/a/b ${HOME}/mk/a/b/c | sort -u`), '1000');
  // Again is fine (mkdir -p), and the user can create files inside.
  await sbx.files.mkdir(`${HOME}/mk/a/b/c`);
  await sh(`touch ${HOME}/mk/a/b/c/f`);
  // Over an existing file it is refused.
  await sbx.files.write(`${HOME}/mk/file`, 'f');
  await failsWith(sbx.files.mkdir(`${HOME}/mk/file/x`), InvalidArgumentError);
  // The user cannot create directories where they may not write; root can.
  await failsWith(sbx.files.mkdir('/opt/by-user/x'), PermissionDeniedError);
  const rootDir = await sbx.files.mkdir('/opt/by-root/x', { user: 'root' });
  assert.equal(rootDir.uid, 0);
});

test('move renames files and directories', async () => {
  await sbx.files.mkdir(`${HOME}/mv`);
  await sbx.files.write(`${HOME}/mv/src.txt`, 'moving');
  const moved = await sbx.files.move(`${HOME}/mv/src.txt`, `${HOME}/mv/dst.txt`);
  assert.equal(moved.path, `${HOME}/mv/dst.txt`);
  assert.equal(moved.type, 'file');
  assert.equal(await sbx.files.exists(`${HOME}/mv/src.txt`), false);
  assert.equal(await sbx.files.readText(`${HOME}/mv/dst.txt`), 'moving');

  await sbx.files.mkdir(`${HOME}/mv/dir1/inner`);
  await sbx.files.write(`${HOME}/mv/dir1/inner/f.txt`, 'inside');
  const dir = await sbx.files.move('mv/dir1', 'mv/dir2');
  assert.equal(dir.path, `${HOME}/mv/dir2`);
  assert.equal(dir.type, 'directory');
  assert.equal(await sbx.files.exists(`${HOME}/mv/dir1`), false);
  assert.equal(await sbx.files.readText(`${HOME}/mv/dir2/inner/f.txt`), 'inside');

  // /tmp is a filesystem of its own: moving out of it copies, keeping owner, mode, links.
  await sbx.files.write('/tmp/mv-across.sh', '#!/bin/sh\necho across\n', { mode: 0o750 });
  await sbx.files.mkdir('/tmp/mv-across-dir/inner');
  await sbx.files.write('/tmp/mv-across-dir/inner/f.txt', 'deep');
  await sh('ln -s inner/f.txt /tmp/mv-across-dir/link');
  const across = await sbx.files.move('/tmp/mv-across.sh', `${HOME}/mv/across.sh`);
  assert.equal(across.mode, 0o750);
  assert.equal(across.uid, 1000);
  assert.equal(await sh(`${HOME}/mv/across.sh`), 'across');
  assert.equal(await sbx.files.exists('/tmp/mv-across.sh'), false);
  const acrossDir = await sbx.files.move('/tmp/mv-across-dir', `${HOME}/mv/across-dir`);
  assert.equal(acrossDir.type, 'directory');
  assert.equal(await sbx.files.readText(`${HOME}/mv/across-dir/link`), 'deep');
  assert.equal(await sh(`stat -c '%u %F' ${HOME}/mv/across-dir/inner ${HOME}/mv/across-dir/link`), '1000 directory\n1000 symbolic link');
  assert.equal(await sbx.files.exists('/tmp/mv-across-dir'), false);
  assert.equal(await sh(`ls -A ${HOME}/mv | grep -c warren-move || true`), '0');

  await failsWith(sbx.files.move(`${HOME}/mv/missing`, `${HOME}/mv/x`), NotFoundError);
  // The user may not move files out of a directory they cannot write.
  await failsWith(sbx.files.move('/etc/hostname', `${HOME}/mv/hostname`), PermissionDeniedError);
  await failsWith(sbx.files.move(`${HOME}/mv/dst.txt`, '/etc/dst.txt'), PermissionDeniedError);
  assert.equal(await sbx.files.exists(`${HOME}/mv/dst.txt`), true);
});

test('remove: a file, a directory tree, false for a missing path', async () => {
  await sbx.files.mkdir(`${HOME}/rm/tree/a/b`);
  await sbx.files.write(`${HOME}/rm/tree/a/b/f.txt`, 'f');
  await sbx.files.write(`${HOME}/rm/tree/top.txt`, 't');
  await sbx.files.write(`${HOME}/rm/single.txt`, 's');

  assert.equal(await sbx.files.remove(`${HOME}/rm/single.txt`), true);
  assert.equal(await sbx.files.exists(`${HOME}/rm/single.txt`), false);
  assert.equal(await sbx.files.remove(`${HOME}/rm/tree`), true);
  assert.equal(await sh(`ls -A ${HOME}/rm`), '');
  assert.equal(await sbx.files.remove(`${HOME}/rm/tree`), false);
  assert.equal(await sbx.files.remove('/no/such/thing'), false);
  await failsWith(sbx.files.remove('/etc/hostname'), PermissionDeniedError);
  assert.equal(await sbx.files.exists('/etc/hostname'), true);
});

test('permissions: the default user cannot touch root-only files; root can', async () => {
  const denied = await failure(sbx.files.write('/etc/warren-test-foo', 'nope'));
  assert.ok(denied instanceof PermissionDeniedError, denied.message);
  assert.equal(denied.status, 403);
  assert.equal(await sh('test -e /etc/warren-test-foo && echo yes || echo no'), 'no');

  // A root-only file like /root/.bashrc: /root is 0700, and the file itself 0600.
  await sbx.files.write('/root/.secret-rc', 'export TOKEN=abc\n', { user: 'root', mode: 0o600 });
  assert.equal(await sh('stat -c %u:%a /root/.secret-rc', 'root'), '0:600');
  for (const p of ['/root/.secret-rc', '/root/.bashrc', '/etc/shadow']) {
    const e = await failure(sbx.files.read(p));
    assert.ok(e instanceof PermissionDeniedError, `${p}: ${e.message}`);
    assert.equal(e.status, 403);
  }
  await failsWith(sbx.files.list('/root'), PermissionDeniedError);
  await failsWith(sbx.files.stat('/root/.secret-rc'), PermissionDeniedError);

  // A 0600 file of root's in a world-readable directory is still unreadable by the user.
  await sbx.files.write('/tmp/root-only.txt', 'hidden', { user: 'root', mode: 0o600 });
  await failsWith(sbx.files.read('/tmp/root-only.txt'), PermissionDeniedError);

  assert.equal(await sbx.files.readText('/root/.secret-rc', { user: 'root' }), 'export TOKEN=abc\n');
  assert.equal(await sbx.files.readText('/tmp/root-only.txt', { user: 'root' }), 'hidden');
  await sbx.files.write('/etc/warren-test-foo', 'yes', { user: 'root' });
  assert.equal(await sh('cat /etc/warren-test-foo'), 'yes');
  assert.ok((await sbx.files.list('/root', { user: 'root' })).some((e) => e.name === '.secret-rc'));
  assert.equal(await sbx.files.remove('/etc/warren-test-foo', { user: 'root' }), true);

  // An unknown user is a usage error.
  await failsWith(sbx.files.read('/etc/hostname', { user: 'nobody-here' }), InvalidArgumentError);
});

test('errors: not found, directory as file, missing path query', async () => {
  const missing = await failure(sbx.files.read(`${HOME}/does-not-exist.txt`));
  assert.ok(missing instanceof NotFoundError, missing.message);
  assert.equal(missing.status, 404);
  await failsWith(sbx.files.stat(`${HOME}/does-not-exist.txt`), NotFoundError);
  await failsWith(sbx.files.list(`${HOME}/no-such-dir`), NotFoundError);
  await failsWith(sbx.files.write(`${HOME}/no-such-dir/f.txt`, 'x'), NotFoundError);

  // Paths the kernel rejects are the caller's mistake, not the agent's.
  await failsWith(sbx.files.write(`${HOME}/${'n'.repeat(300)}`, 'x'), InvalidArgumentError);
  await failsWith(sbx.files.stat(`${HOME}/${'n'.repeat(300)}/x`), InvalidArgumentError);
  await sh('ln -sfn loop-b /tmp/loop-a && ln -sfn loop-a /tmp/loop-b');
  await failsWith(sbx.files.read('/tmp/loop-a'), InvalidArgumentError);
  await failsWith(sbx.files.list('/tmp/loop-a/x'), InvalidArgumentError);

  const dir = await failure(sbx.files.read(HOME));
  assert.ok(dir instanceof InvalidArgumentError, dir.message);
  assert.equal(dir.status, 400);
  // Writing over a directory is refused too, and leaves it a directory.
  await sbx.files.mkdir(`${HOME}/a-directory`);
  await failsWith(sbx.files.write(`${HOME}/a-directory`, 'x'), InvalidArgumentError);
  assert.equal((await sbx.files.stat(`${HOME}/a-directory`)).type, 'directory');

  const base = `${d.url}/v1/sandboxes/${sbx.id}/files`;
  const auth = { authorization: `Bearer ${d.apiKey}` };
  for (const [method, url] of [
    ['GET', base],
    ['GET', `${base}?path=`],
    ['PUT', base],
    ['DELETE', base],
    ['GET', `${base}/stat`],
    ['GET', `${base}/exists`],
    ['GET', `${base}/list`],
  ] as const) {
    const res = await fetch(url, { method, headers: auth, ...(method === 'PUT' ? { body: 'x' } : {}) });
    assert.equal(res.status, 400, `${method} ${url}`);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'invalid_argument');
    assert.match(body.error.message, /path/);
  }
  for (const depth of ['0', '-1', '33', '1.5', 'abc']) {
    const res = await fetch(`${base}/list?path=/tmp&depth=${depth}`, { headers: auth });
    assert.equal(res.status, 400, `depth=${depth}`);
  }
});

test('a large upload the agent refuses fails at once and leaves the channel usable', { timeout: 120_000 }, async () => {
  // More than the stream window, so the daemon is waiting for credit when the refusal comes.
  const big = randomBytes(32 * MiB);
  await failsWith(sbx.files.write('/etc/warren-denied.bin', big), PermissionDeniedError);
  await failsWith(sbx.files.write(`${HOME}/no-such-dir/big.bin`, big), NotFoundError);
  const stream = pseudoRandomReadable(32 * MiB, 'refused');
  await failsWith(sbx.files.write('/etc/warren-denied.bin', stream.stream), PermissionDeniedError);
  assert.equal(await sh('ls -A /etc | grep -c warren-upload || true'), '0');
  await sbx.files.write(`${HOME}/after-refusal.txt`, 'fine');
  assert.equal(await sbx.files.readText(`${HOME}/after-refusal.txt`), 'fine');
});

test('uploads larger than the sandbox disk get 413 and leave nothing', { timeout: 120_000 }, async () => {
  const small = await d.create({ resources: { diskMB: 64 } });
  try {
    // Declared up front: refused before any byte is read, and the connection stays usable.
    const declared = await failure(small.files.write('big.bin', Buffer.alloc(65 * MiB)));
    assert.equal(declared.status, 413, declared.message);
    assert.equal(declared.code, 'too_large');
    assert.equal(await small.files.exists('big.bin'), false);
    assert.deepEqual(
      (await small.files.list(HOME)).filter((e) => e.name.startsWith('.warren-')),
      [],
    );
    // Within the limit is fine.
    await small.files.write('fits.bin', pseudoRandomReadable(16 * MiB, 'fits').stream);
    assert.equal((await small.files.stat('fits.bin')).size, 16 * MiB);
    await small.files.remove('fits.bin');
    // What the sandbox already holds counts: with 40 MiB written, 30 MiB more would pass 64.
    await small.files.write('held.bin', pseudoRandomReadable(40 * MiB, 'held').stream);
    const over = await failure(small.files.write('more.bin', Buffer.alloc(30 * MiB)));
    assert.equal(over.status, 413, over.message);
    assert.match(over.message, /left of the sandbox's disk limit/);
    assert.equal((await small.refresh()).state, 'running', 'a refused upload does not stop the sandbox');
    await small.files.remove('held.bin');

    // Streamed without a length: refused once the count passes the limit.
    const streamed = await failure(small.files.write('big.bin', pseudoRandomReadable(65 * MiB, 'too-large').stream));
    assert.equal(streamed.status, 413, streamed.message);
    assert.equal(streamed.code, 'too_large');
    // Until it was refused the upload filled the disk, so the daemon's disk check may have
    // stopped the sandbox meanwhile (it says so); if not, nothing of the upload is left.
    await eventually(
      async () => {
        const info = await small.refresh();
        if (info.state === 'dead') return /disk limit/.test(info.error ?? '');
        return (await small.files.list(HOME)).every((e) => !e.name.startsWith('.warren-upload-') && e.name !== 'big.bin');
      },
      15_000,
      'the refused upload to leave nothing behind',
    );
  } finally {
    await small.kill().catch(() => undefined);
  }
});

test('special files: /proc reads in full, devices and FIFOs are refused, the connection survives', async () => {
  // procfs reports size 0; the body must still be the whole content with a matching length.
  for (let i = 0; i < 3; i++) {
    const meminfo = await sbx.files.readText('/proc/meminfo');
    assert.match(meminfo, /^MemTotal:/m);
    const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files?path=/proc/meminfo`, { headers: { authorization: `Bearer ${d.apiKey}` } });
    const body = Buffer.from(await res.arrayBuffer());
    assert.equal(res.status, 200);
    assert.equal(Number(res.headers.get('content-length')), body.length);
  }
  await sh('rm -f /tmp/fifo && mkfifo -m 666 /tmp/fifo');
  for (const p of ['/dev/zero', '/dev/null', '/tmp/fifo']) {
    const e = await failsWith(sbx.files.read(p), InvalidArgumentError);
    assert.match(e.message, /not a regular file/);
  }
  // Same keep-alive connections, still in step.
  await sbx.files.write(`${HOME}/after-special.txt`, 'in step');
  assert.equal(await sbx.files.readText(`${HOME}/after-special.txt`), 'in step');
  assert.equal(await sh('echo alive'), 'alive');
});

test('a file that grows while it is read comes back whole up to its size at open', { timeout: 180_000 }, async () => {
  const log = `${HOME}/growing.log`;
  // Bursts of 100000 numbered lines (~0.6 MB) several times a second, so the file grows
  // during every read; bounded to ~24 MB.
  const block = 100_000;
  const writer = await sbx.exec(`for i in $(seq 40); do seq 1 ${block}; sleep 0.2; done > ${log}`, { background: true });
  try {
    await eventually(async () => (await sbx.files.stat(log).catch(() => ({ size: 0 }))).size > 2 * MiB, 30_000, 'the log to grow');
    // One keep-alive connection for everything, so a response that sends more or fewer bytes
    // than its Content-Length shows up in the next request on it.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 4; i++) {
        const res = await rawGet(agent, `/v1/sandboxes/${sbx.id}/files?path=${encodeURIComponent(log)}`);
        assert.equal(res.status, 200);
        assert.equal(Number(res.headers['content-length']), res.body.length);
        const health = await rawGet(agent, '/v1/health');
        assert.equal(health.status, 200);
        assert.ok(health.reusedSocket, 'the connection was kept');
        assert.equal((JSON.parse(health.body.toString()) as { ok: boolean }).ok, true);
        const lines = res.body.toString('utf8').split('\n');
        assert.ok(lines.length > 1000, 'read something');
        // Whole blocks of lines, in order (the last line may be cut mid-line).
        const bad = lines.slice(0, -1).findIndex((l, n) => l !== String((n % block) + 1));
        assert.equal(bad, -1, `line ${bad + 1} is ${JSON.stringify(lines[bad])}`);
      }
    } finally {
      agent.destroy();
    }
  } finally {
    await writer.kill().catch(() => undefined);
    await sbx.files.remove(log).catch(() => undefined);
  }
  // The keep-alive connections used for the reads are still in step.
  await sbx.files.write(`${HOME}/after-growing.txt`, 'in step');
  assert.equal(await sbx.files.readText(`${HOME}/after-growing.txt`), 'in step');
  assert.equal(await sh('echo alive'), 'alive');
});

test('HEAD on a file gives its size without streaming it', async () => {
  const p = `${HOME}/head.bin`;
  await sbx.files.write(p, pseudoRandomReadable(16 * MiB, 'head').stream);
  const before = d.rss();
  // Each request that left its stream open would hold a flow-control window (4 MiB) in the
  // daemon until the sandbox dies.
  for (let i = 0; i < 30; i++) {
    const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files?path=${encodeURIComponent(p)}`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${d.apiKey}` },
    });
    assert.equal(res.status, 200);
    assert.equal(Number(res.headers.get('content-length')), 16 * MiB);
    assert.equal((await res.arrayBuffer()).byteLength, 0);
  }
  const growth = d.rss() - before;
  assert.ok(growth < 60 * MiB, `daemon rss grew by ${(growth / MiB).toFixed(0)} MiB over 30 HEAD requests`);
  const missing = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files?path=/no/such/file`, { method: 'HEAD', headers: { authorization: `Bearer ${d.apiKey}` } });
  assert.equal(missing.status, 404);
  // The agent is not stuck on abandoned streams: a full read still flows.
  assert.equal(sha256(await sbx.files.read(p)), await sh(`sha256sum ${p} | cut -d' ' -f1`));
  await sbx.files.remove(p);
});

test('killing a sandbox mid-download and with reads pending leaves the daemon up', { timeout: 120_000 }, async () => {
  const doomed = await d.create();
  await doomed.files.write('big.bin', pseudoRandomReadable(32 * MiB, 'doomed').stream);
  await doomed.files.write('small.txt', 'small');
  const res = await fetch(`${d.url}/v1/sandboxes/${doomed.id}/files?path=big.bin`, { headers: { authorization: `Bearer ${d.apiKey}` } });
  const reader = res.body!.getReader();
  assert.equal((await reader.read()).done, false);
  // Reads still waiting for the agent's answer when the channel goes.
  const pending = Array.from({ length: 30 }, () =>
    doomed.files.read('small.txt').then(
      () => 'read',
      (e: Error) => e,
    ),
  );
  await doomed.kill();
  for (const r of await Promise.all(pending)) {
    assert.ok(r === 'read' || r instanceof WarrenError, `a pending read ended with ${String(r)}`);
  }
  // The interrupted download ends (with an error, or short of its Content-Length).
  let received = 0;
  try {
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) received += chunk.value.length;
  } catch {
    // reset: fine
  }
  assert.ok(received < 32 * MiB, 'the download did not complete after the kill');
  assert.equal(d.process.exitCode, null, `the daemon exited:\n${d.log().slice(-2000)}`);
  assert.equal(d.process.signalCode, null);
  assert.equal(await sh('echo alive'), 'alive');
});

test('a client that stops reading a download holds the agent back: the daemon does not buffer the file', { timeout: 300_000 }, async () => {
  const total = 256 * MiB;
  const src = pseudoRandomReadable(total, 'stalled-reader');
  await sbx.files.write('stalled.bin', src.stream);
  const expected = src.digest();
  try {
    const baseline = d.rss();
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      http.get(`${d.url}/v1/sandboxes/${sbx.id}/files?path=stalled.bin`, { headers: { authorization: `Bearer ${d.apiKey}` } }, resolve).on('error', reject);
    });
    assert.equal(res.statusCode, 200);
    const hash = createHash('sha256');
    let size = 0;
    const first = await new Promise<Buffer>((resolve) => res.once('data', resolve));
    res.pause();
    hash.update(first);
    size += first.length;
    // Stalled: the daemon may hold its credit window and socket buffers, never the file.
    const sampler = rssSampler(d);
    await new Promise((r) => setTimeout(r, 4000));
    const stalledPeak = sampler.stop();
    assert.ok(
      stalledPeak - baseline < 100 * MiB,
      `daemon rss grew by ${((stalledPeak - baseline) / MiB).toFixed(0)} MiB while the client read nothing (file: ${total / MiB} MiB)`,
    );
    for await (const chunk of res) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    assert.equal(size, total);
    assert.equal(hash.digest('hex'), expected);
  } finally {
    await sbx.files.remove('stalled.bin').catch(() => undefined);
  }
});

test('files calls on a killed sandbox get 404', async () => {
  const gone = await d.create();
  await gone.files.write('x.txt', 'x');
  await gone.kill();
  const calls: Array<[string, () => Promise<unknown>]> = [
    ['read', () => gone.files.read('x.txt')],
    ['readStream', () => gone.files.readStream('x.txt')],
    ['write', () => gone.files.write('y.txt', 'y')],
    ['write stream', () => gone.files.write('y.txt', Readable.from([Buffer.from('y')]))],
    ['list', () => gone.files.list('/')],
    ['stat', () => gone.files.stat('x.txt')],
    ['exists', () => gone.files.exists('x.txt')],
    ['mkdir', () => gone.files.mkdir('d')],
    ['move', () => gone.files.move('x.txt', 'z.txt')],
    ['remove', () => gone.files.remove('x.txt')],
  ];
  for (const [name, call] of calls) {
    const e = await failure(call());
    assert.ok(e instanceof NotFoundError, `${name}: ${e.constructor.name} ${e.message}`);
    assert.equal(e.status, 404, name);
  }
});

/**
 * Reproducible pseudo-random bytes (AES-CTR keystream of a seed), hashed as they are
 * produced so the expected digest needs no second pass or copy.
 */
function pseudoRandomReadable(total: number, seed: string): { stream: Readable; digest: () => string } {
  const cipher = createCipheriv('aes-256-ctr', createHash('sha256').update(seed).digest(), Buffer.alloc(16));
  const zeros = Buffer.alloc(MiB);
  const hash = createHash('sha256');
  let produced = 0;
  const stream = new Readable({
    highWaterMark: MiB,
    read() {
      if (produced >= total) {
        this.push(null);
        return;
      }
      const chunk = cipher.update(zeros.subarray(0, Math.min(MiB, total - produced)));
      produced += chunk.length;
      hash.update(chunk);
      this.push(chunk);
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

/** Samples the daemon's RSS every 200 ms until stopped; returns the peak. */
function rssSampler(daemon: DaemonHandle): { stop: () => number } {
  let peak = daemon.rss();
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, daemon.rss());
    } catch {
      // the daemon exiting is reported by the transfer failing
    }
  }, 200);
  return {
    stop: () => {
      clearInterval(timer);
      return Math.max(peak, daemon.rss());
    },
  };
}

const mibps = (bytes: number, ms: number) => (bytes / MiB / (ms / 1000)).toFixed(1);

test('a 1 GiB file streams both ways with bounded daemon memory', { timeout: 15 * 60_000 }, async (t: TestContext) => {
  const total = 1024 * MiB;
  const target = `${HOME}/big.bin`;
  // Growth allowed over the baseline; a file held whole would add ~1 GiB.
  const maxGrowth = 150 * 1024 * 1024;
  try {
    const baseline = d.rss();

    const src = pseudoRandomReadable(total, 'warren-files-1gib');
    let sampler = rssSampler(d);
    let started = Date.now();
    const w = await sbx.files.write(target, src.stream);
    const writeMs = Date.now() - started;
    const writePeak = sampler.stop();
    const expected = src.digest();
    assert.deepEqual(w, { size: total, path: target });

    const readBaseline = d.rss();
    sampler = rssSampler(d);
    started = Date.now();
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of await sbx.files.readStream(target)) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    const readMs = Date.now() - started;
    const readPeak = sampler.stop();

    t.diagnostic(`write: ${mibps(total, writeMs)} MiB/s (${writeMs} ms); read: ${mibps(total, readMs)} MiB/s (${readMs} ms)`);
    t.diagnostic(
      `daemon rss: baseline ${(baseline / MiB).toFixed(0)} MiB, peak during write ${(writePeak / MiB).toFixed(0)} MiB, ` +
        `peak during read ${(readPeak / MiB).toFixed(0)} MiB (read baseline ${(readBaseline / MiB).toFixed(0)} MiB)`,
    );

    assert.equal(size, total);
    assert.equal(hash.digest('hex'), expected);
    assert.ok(writePeak - baseline < maxGrowth, `daemon rss grew by ${((writePeak - baseline) / MiB).toFixed(0)} MiB during the upload`);
    assert.ok(
      readPeak - Math.min(baseline, readBaseline) < maxGrowth,
      `daemon rss grew by ${((readPeak - baseline) / MiB).toFixed(0)} MiB during the download`,
    );

    const st = await sbx.files.stat(target);
    assert.equal(st.size, total);
    assert.equal(await sh(`sha256sum ${target} | cut -d' ' -f1`), expected);
  } finally {
    await sbx.files.remove(target).catch(() => undefined);
  }
});

test('an upload aborted mid-way leaves neither the file nor a temp file', async () => {
  const dir = `${HOME}/aborted`;
  const target = `${dir}/partial.bin`;
  await sbx.files.mkdir(dir);
  const ac = new AbortController();
  let sent = 0;
  // 64 MiB, then the body stalls until the abort: the upload is certainly mid-way when it is
  // aborted, however fast the transfer (an unending body raced a fast one to its cap).
  const aborted = new Promise<void>((resolve) => ac.signal.addEventListener('abort', () => resolve()));
  const body = new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (sent >= 64 * MiB) return aborted;
      const chunk = randomBytes(256 * 1024);
      sent += chunk.length;
      ctl.enqueue(chunk);
    },
  });
  const upload = fetch(`${d.url}/v1/sandboxes/${sbx.id}/files?path=${encodeURIComponent(target)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/octet-stream' },
    body,
    duplex: 'half',
    signal: ac.signal,
  } as RequestInit);
  upload.catch(() => undefined); // awaited below; avoid an unhandled rejection meanwhile
  try {
    // Abort only once the agent is demonstrably mid-upload: its temp file exists and has data.
    const tmp = await eventually(
      async () => (await sbx.files.list(dir)).find((e) => e.name.startsWith('.warren-upload-') && e.size > 0),
      60_000,
      'the upload temp file to appear',
    );
    assert.ok(tmp); // eventually() only returns truthy values
    assert.equal(await sbx.files.exists(target), false, 'the target appears only when the upload completes');
    const logFrom = d.log().length;
    ac.abort();
    await assert.rejects(upload, (e: Error) => e.name === 'AbortError');
    assert.ok(sent <= 64 * MiB, 'the body never ran past its stall');
    await eventually(async () => (await sbx.files.list(dir)).length === 0, 15_000, `${dir} to be empty after the abort (had ${tmp.name})`);
    // Still empty once the daemon is done with the request (it logs the cut body as a failed
    // request): a late End must not commit the partial upload. Any End it sent is then ahead
    // of the calls below on the sandbox's channel, which the agent handles in order.
    await d.waitForLog(
      (e) => e.msg === 'request failed' && e.method === 'PUT' && e.path === `/v1/sandboxes/${sbx.id}/files`,
      15_000,
      'the daemon to finish the aborted upload',
      logFrom,
    );
    assert.deepEqual(await sbx.files.list(dir), []);
    assert.equal(await sh(`ls -A ${dir}`), '');
    assert.equal(await sbx.files.exists(target), false);
  } finally {
    ac.abort();
  }
  // The channel is still healthy for the next call.
  await sbx.files.write(target, 'ok');
  assert.equal(await sbx.files.readText(target), 'ok');
});
