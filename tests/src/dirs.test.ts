/**
 * Directory transfer against real sandboxes: uploadDir/downloadDir round trips (checksums,
 * modes, symlinks, mtimes, an empty directory, 2,000 files), exists policies, writeMany,
 * `warren cp -r` both ways, and hostile archives in both directions: refused, naming the
 * member, with nothing written outside the destination and nothing partial inside.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { extractDir, type Sandbox, type WarrenError } from '@warren/sdk';
import { REPO, eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
let sbx: Sandbox;
let scratch: string;

before(async () => {
  d = await startDaemon();
  sbx = await d.create({ ttlSeconds: 1800 });
  scratch = mkdtempSync(path.join(tmpdir(), 'warren-dirs-'));
});
after(async () => {
  rmSync(scratch, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

async function sh(cmd: string, user?: string): Promise<string> {
  const r = await sbx.exec(cmd, { user, timeoutSeconds: 600 });
  assert.equal(r.exitCode, 0, `${cmd} failed: ${r.stderr}`);
  return r.stdout.trim();
}

/** path -> "type mode size sha/target" of every entry under dir, sorted. */
function manifest(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(path.join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(path.join(dir, r));
      if (st.isDirectory()) {
        out.push(`${r} d ${(st.mode & 0o777).toString(8)}`);
        walk(r);
      } else if (st.isSymbolicLink()) out.push(`${r} l ${readlinkSync(path.join(dir, r))}`);
      else
        out.push(
          `${r} f ${(st.mode & 0o777).toString(8)} ${createHash('sha256')
            .update(readFileSync(path.join(dir, r)))
            .digest('hex')
            .slice(0, 16)} ${Math.floor(st.mtimeMs / 1000)}`,
        );
    }
  };
  walk('');
  return out;
}

/** One ustar header block (plus data) for crafted archives. */
function entry(name: string, opts: { type?: string; data?: Buffer; link?: string; mode?: number } = {}): Buffer {
  const h = Buffer.alloc(512);
  const data = opts.data ?? Buffer.alloc(0);
  h.write(name, 0, 100, 'utf8');
  h.write(`${(opts.mode ?? 0o644).toString(8).padStart(7, '0')}\0`, 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124);
  h.write(
    `${Math.floor(Date.now() / 1000)
      .toString(8)
      .padStart(11, '0')}\0`,
    136,
  );
  h.write('        ', 148);
  h.write(opts.type ?? '0', 156);
  if (opts.link) h.write(opts.link, 157, 100, 'utf8');
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad]);
}
function archive(...entries: Buffer[]): Buffer {
  return Buffer.concat([...entries, Buffer.alloc(1024)]);
}

async function putTar(remote: string, body: Buffer): Promise<{ status: number; text: string }> {
  const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files/dir?path=${encodeURIComponent(remote)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/x-tar' },
    body: new Uint8Array(body),
  });
  return { status: res.status, text: await res.text() };
}

function makeTree(root: string): void {
  mkdirSync(path.join(root, 'src/deep/er'), { recursive: true });
  mkdirSync(path.join(root, 'empty'));
  writeFileSync(path.join(root, 'src/run.sh'), '#!/bin/sh\necho hi\n');
  chmodSync(path.join(root, 'src/run.sh'), 0o755);
  writeFileSync(path.join(root, 'secret'), 'only me');
  chmodSync(path.join(root, 'secret'), 0o600);
  writeFileSync(path.join(root, 'src/deep/er/blob.bin'), Buffer.from(Array.from({ length: 300000 }, (_, i) => (i * 7) % 251)));
  symlinkSync('../secret', path.join(root, 'src/link-to-secret'));
  symlinkSync('deep/er', path.join(root, 'src/short'));
  utimesSync(path.join(root, 'secret'), 1_600_000_000, 1_600_000_000);
}

test('uploadDir then downloadDir keeps contents, modes, symlinks, mtimes and empty directories', async () => {
  const local = path.join(scratch, 'tree');
  makeTree(local);
  const r = await sbx.files.uploadDir(local, '/home/user/tree');
  assert.equal(r.path, '/home/user/tree');
  assert.equal(r.files, 3);
  assert.equal(r.symlinks, 2);
  assert.equal(await sh('stat -c %a:%U /home/user/tree/src/run.sh /home/user/tree/secret | tr "\\n" " "'), '755:user 600:user');
  assert.equal(await sh('readlink /home/user/tree/src/link-to-secret; stat -c %Y /home/user/tree/secret | tr "\\n" " "'), '../secret\n1600000000');
  assert.equal(await sh('sh /home/user/tree/src/run.sh'), 'hi');
  assert.equal(await sh('ls -A /home/user | grep -c "^.warren-" || true'), '0');
  const back = path.join(scratch, 'back');
  await sbx.files.downloadDir('/home/user/tree', back);
  assert.deepEqual(manifest(back), manifest(local));
});

test('a 2,000-file tree round trips', async () => {
  const local = path.join(scratch, 'many');
  for (let i = 0; i < 2000; i++) {
    const dir = path.join(local, `d${i % 40}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, `f${i}.txt`), `file ${i}\n`.repeat(i % 13));
  }
  const r = await sbx.files.uploadDir(local, 'many');
  assert.equal(r.files, 2000);
  assert.equal(await sh('find /home/user/many -type f | wc -l'), '2000');
  const back = path.join(scratch, 'many-back');
  await sbx.files.downloadDir('many', back);
  assert.deepEqual(manifest(back), manifest(local));
});

test('exists policies: merge (default), replace, error', async () => {
  await sh('mkdir -p /home/user/dest/keep && echo old > /home/user/dest/a && echo kept > /home/user/dest/keep/k');
  const src = path.join(scratch, 'pol');
  mkdirSync(path.join(src, 'keep'), { recursive: true });
  writeFileSync(path.join(src, 'a'), 'new\n');
  writeFileSync(path.join(src, 'keep/n'), 'n\n');
  await sbx.files.uploadDir(src, '/home/user/dest');
  assert.equal(await sh('cat /home/user/dest/a /home/user/dest/keep/k /home/user/dest/keep/n | tr "\\n" " "'), 'new kept n');
  await assert.rejects(sbx.files.uploadDir(src, '/home/user/dest', { exists: 'error' }), (err: WarrenError) => err.code === 'conflict');
  // The replaced tree has a read-only directory, as archives often leave: still removed.
  await sh('mkdir -p /home/user/dest/ro && echo r > /home/user/dest/ro/r && chmod 555 /home/user/dest/ro');
  await sbx.files.uploadDir(src, '/home/user/dest', { exists: 'replace' });
  assert.equal(await sh('ls /home/user/dest/keep | tr "\\n" " "'), 'n');
  assert.equal(await sh('test -e /home/user/dest/ro && echo stale || echo gone'), 'gone');
  // The old tree goes after the answer, by a process of the user's: nothing of it stays.
  await eventually(async () => (await sh('ls -A /home/user | grep -c "^\\.warren-old-" || true')) === '0', 30_000, 'the replaced tree to be removed');
  // A directory against a file: refused before anything moves.
  await sh('rm -rf /home/user/dest2 && mkdir -p /home/user/dest2 && echo f > /home/user/dest2/keep && echo old > /home/user/dest2/a');
  await assert.rejects(sbx.files.uploadDir(src, '/home/user/dest2'), (err: WarrenError) => err.code === 'conflict' && /keep/.test(err.message));
  assert.equal(await sh('cat /home/user/dest2/a'), 'old');
});

test('writeMany writes several files in one call', async () => {
  const r = await sbx.files.writeMany([
    { path: 'wm/a.txt', data: 'A' },
    { path: '/home/user/wm-run.sh', data: Buffer.from('#!/bin/sh\necho ok\n'), mode: 0o755 },
  ]);
  assert.equal(r.files.length, 2);
  assert.equal(await sh('stat -c %a /home/user/wm-run.sh && /home/user/wm-run.sh | tr "\\n" " "'), '755\nok');
});

const hostile: Array<[string, Buffer, RegExp]> = [
  ['dot-dot', archive(entry('ok.txt', { data: Buffer.from('x') }), entry('../escaped', { data: Buffer.from('x') })), /"\.\.\/escaped".*'\.\.'/],
  ['absolute', archive(entry('/tmp/abs-escaped', { data: Buffer.from('x') })), /"\/tmp\/abs-escaped".*absolute/],
  [
    'symlink to / then a member under it',
    archive(entry('root', { type: '2', link: '/' }), entry('root/tmp/via-link', { data: Buffer.from('x') })),
    /"root".*absolute path/,
  ],
  ['relative symlink escape', archive(entry('up', { type: '2', link: '../..' })), /"up".*outside/],
  ['symlink chain escape', archive(entry('s', { type: '2', link: '.' }), entry('t', { type: '2', link: 's/..' })), /"t".*'\.\.' after a name/],
  [
    'member through a symlink',
    archive(entry('dir', { type: '5', mode: 0o755 }), entry('l', { type: '2', link: 'dir' }), entry('l/x', { data: Buffer.from('x') })),
    /"l\/x".*through the symlink/,
  ],
  ['hard link to outside', archive(entry('h', { type: '1', link: '/etc/passwd' })), /"h".*hard link/],
  ['hard link to a file not in the archive', archive(entry('h', { type: '1', link: 'nothere' })), /"h".*hard link/],
  ['device', archive(entry('dev', { type: '3' })), /"dev".*unsupported/],
];

for (const [what, body, message] of hostile) {
  test(`upload refuses a hostile archive: ${what}`, async () => {
    await sh('rm -rf /home/user/hostile /tmp/abs-escaped /tmp/via-link');
    const r = await putTar('/home/user/hostile/x', body);
    assert.equal(r.status, 404, r.text); // parent missing: not found before anything
    await sh('mkdir -p /home/user/hostile');
    const refused = await putTar('/home/user/hostile/x', body);
    assert.equal(refused.status, 400, refused.text);
    assert.match((JSON.parse(refused.text) as { error: { message: string } }).error.message, message);
    assert.equal(await sh('ls -A /home/user/hostile | wc -l'), '0', 'nothing partial inside');
    assert.equal(await sh('ls /tmp/abs-escaped /tmp/via-link /home/user/escaped /home/user/hostile/escaped 2>/dev/null | wc -l'), '0', 'nothing outside');
  });
}

for (const [what, body, message] of hostile) {
  test(`download extraction refuses a hostile archive: ${what}`, async () => {
    const dest = path.join(scratch, 'hostile-dl', 'out');
    rmSync(path.dirname(dest), { recursive: true, force: true });
    mkdirSync(path.dirname(dest), { recursive: true });
    await assert.rejects(extractDir(Readable.from([body]), dest), (err: Error) => message.test(err.message));
    assert.deepEqual(readdirSync(path.dirname(dest)), [], 'nothing partial, nothing beside');
    assert.equal(existsSync('/tmp/abs-escaped') || existsSync(path.join(scratch, 'escaped')), false);
  });
}

test('a member named with control characters comes back escaped in the error', async () => {
  await sh('mkdir -p /home/user/ctl');
  const r = await putTar('/home/user/ctl/x', archive(entry('\x1b[31mred/../../x', { data: Buffer.from('x') })));
  assert.equal(r.status, 400);
  const message = (JSON.parse(r.text) as { error: { message: string } }).error.message;
  assert.ok(!message.includes('\x1b'), 'no raw ESC in the message');
  assert.match(message, /\\u001b\[31mred/);
});

test('warren cp -r copies a tree both ways with cp -r semantics; file names with control characters are escaped', async () => {
  const local = path.join(scratch, 'cli-src');
  mkdirSync(path.join(local, 'sub'), { recursive: true });
  writeFileSync(path.join(local, 'sub/f'), 'f\n');
  const env = { ...process.env, WARREN_URL: d.url, WARREN_API_KEY: d.apiKey };
  const warren = (...args: string[]) => spawnSync(path.join(REPO, 'bin/warren'), args, { env, encoding: 'utf8' });
  await sh('rm -rf /home/user/clidst && mkdir /home/user/clidst');
  let r = warren('cp', '-r', local, `${sbx.id}:/home/user/clidst`);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(await sh('cat /home/user/clidst/cli-src/sub/f'), 'f'); // into the existing directory
  r = warren('cp', '-r', local, `${sbx.id}:/home/user/clinew`);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(await sh('cat /home/user/clinew/sub/f'), 'f'); // as the new directory
  await sh('touch "/home/user/clinew/$(printf \'evil\\033]0;title\\007\')"');
  const back = path.join(scratch, 'cli-back');
  r = warren('cp', '-r', `${sbx.id}:/home/user/clinew`, back);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(!r.stderr.includes('\x1b') && !r.stdout.includes('\x1b'));
  assert.equal(readFileSync(path.join(back, 'sub/f'), 'utf8'), 'f\n');
  assert.ok(readdirSync(back).some((n) => n.startsWith('evil')));
});

test('a download that tar cannot finish (an unreadable file) fails and leaves nothing on the host', async () => {
  await sh('rm -rf /home/user/unreadable && mkdir -p /home/user/unreadable && echo a > /home/user/unreadable/a');
  await sh('echo secret > /home/user/unreadable/b && chown root:root /home/user/unreadable/b && chmod 600 /home/user/unreadable/b', 'root');
  const box = path.join(scratch, 'unreadable-box');
  mkdirSync(box);
  await assert.rejects(sbx.files.downloadDir('/home/user/unreadable', path.join(box, 'out')));
  assert.deepEqual(readdirSync(box), [], 'nothing partial, nothing beside');
  // As root the same directory downloads.
  await sbx.files.downloadDir('/home/user/unreadable', path.join(box, 'out'), { user: 'root' });
  assert.equal(readFileSync(path.join(box, 'out/b'), 'utf8'), 'secret\n');
});

test('a client that goes away mid-upload leaves nothing: no destination, no temporary directory', async () => {
  await sh('rm -rf /home/user/cut && mkdir -p /home/user/cut');
  // A member that promises 4 MiB, of which only the first 64 KiB are sent before the client vanishes.
  const whole = archive(entry('big.bin', { data: Buffer.alloc(4 * 1024 * 1024, 7) }));
  const url = new URL(`${d.url}/v1/sandboxes/${sbx.id}/files/dir?path=${encodeURIComponent('/home/user/cut/x')}`);
  await new Promise<void>((resolve) => {
    const req = http.request(url, { method: 'PUT', headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/x-tar' } });
    req.on('error', () => resolve());
    req.write(whole.subarray(0, 512 + 64 * 1024), () =>
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 300),
    );
  });
  await eventually(async () => (await sh('ls -A /home/user/cut | wc -l')) === '0' || undefined, 30_000, 'the partial upload is removed');
  assert.equal((await sbx.exec('echo alive')).stdout, 'alive\n');
});

test('bad requests: a file as the directory, an unknown exists policy, a missing directory', async () => {
  await sh('echo x > /home/user/plainfile');
  await assert.rejects(sbx.files.downloadDir('/home/user/plainfile', path.join(scratch, 'nope')), (err: WarrenError) => err.code === 'invalid_argument');
  await assert.rejects(sbx.files.downloadDir('/home/user/missing-dir', path.join(scratch, 'nope')), (err: WarrenError) => err.code === 'not_found');
  const r = await putTar('/home/user/plainfile', archive(entry('a', { data: Buffer.from('x') })));
  assert.equal(r.status, 409, r.text);
  const bad = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files/dir?path=/home/user/x&exists=sometimes`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${d.apiKey}` },
    body: new Uint8Array(archive()),
  });
  assert.equal(bad.status, 400);
  assert.equal(existsSync(path.join(scratch, 'nope')), false);
});
