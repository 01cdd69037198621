/**
 * Security battery, directory transfers (docs/security.md): a hostile sandbox's root replaces
 * the `tar` the agent runs with a script that answers every download with a crafted archive
 * hiding `s1 -> x/up/..` (with `x/up -> ..`, DIR/s1 would be DIR's parent) behind a framing
 * the old check read differently from node-tar. The TS SDK's downloadDir and `warren cp -r`
 * refuse each one, leave nothing beside the destination (no `.warren-download-*`) and no
 * symlink anywhere. An upload with such a framing, sent raw, is a 400 that writes nothing.
 * Two downloads merged into one destination (`d -> .`, then `e -> d/d/d/../../..`, which
 * stays inside only while `d` is no link) cannot make a link lead out: `..` after a name is
 * refused in a target, in whichever download brings it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Sandbox } from '@warren/sdk';
import { header as block } from '@warren/protocol/tar-craft';
import { runWarren, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
let d: DaemonHandle | undefined;
let sbx: Sandbox;
let scratch: string;

before(async () => {
  d = await startDaemon();
  sbx = await d.create({ ttlSeconds: 1800 });
  scratch = mkdtempSync(path.join(tmpdir(), 'warren-sec-dirs-'));
});
after(async () => {
  rmSync(scratch, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

/** One ustar header block: `magic` is the 8 bytes at 257, `size` may lie about the data that follows. */
function header(name: string, type: string, o: { size?: number; link?: string; magic?: string; prefix?: string } = {}): Buffer {
  return block({ name, type, mode: 0o755, size: o.size, linkname: o.link, magic: o.magic, prefix: o.prefix });
}

const base = [header('x/', '5'), header('x/up', '2', { link: '..' })];
const s1 = header('s1', '2', { link: 'x/up/..' });
const END = Buffer.alloc(1024);
/** Each hides s1 from one of the two parsers the old download path used (its check, node-tar). */
const framings: Array<[string, Buffer, RegExp]> = [
  ['a directory header with a size', Buffer.concat([...base, header('hide/', '5', { size: 512 }), s1, END]), /"hide\/": a directory header with a size/],
  [
    'ustar version 0\\0 with a prefix',
    Buffer.concat([...base, header('s1', '2', { link: 'x/up/..', magic: 'ustar\x000\x00', prefix: 'p' }), END]),
    /neither POSIX ustar nor GNU/,
  ],
  ['a regular file named hide/', Buffer.concat([...base, header('hide/', '0', { size: 512 }), s1, END]), /"hide\/": a name ending in '\/'/],
];

async function sh(cmd: string, user = 'user'): Promise<string> {
  const r = await sbx.exec(cmd, { user, timeoutSeconds: 120 });
  assert.equal(r.exitCode, 0, `${cmd} failed: ${r.stderr}`);
  return r.stdout.trim();
}

/** Every symlink under dir, never following one. */
function symlinksUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((p) => lstatSync(path.join(dir, p)).isSymbolicLink());
}

/** Runs `download` with the sandbox's tar answering `archive`; asserts the refusal left nothing on the host. */
async function hostileDownload(archive: Buffer, download: (dest: string) => Promise<string>, message: RegExp): Promise<void> {
  await sbx.files.write('/tmp/evil.tar', archive);
  await sh('mkdir -p /home/user/src && echo real > /home/user/src/file');
  await sh("printf '#!/bin/sh\\nexec cat /tmp/evil.tar\\n' > /usr/local/bin/tar && chmod 755 /usr/local/bin/tar", 'root');
  // The agent's PATH for tar (guest dirs.ts, TAR_ENV) finds the hostile one first.
  assert.equal(await sh('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v tar'), '/usr/local/bin/tar');
  const parent = mkdtempSync(path.join(scratch, 'dl-'));
  writeFileSync(path.join(parent, 'sentinel'), 'kept');
  try {
    const error = await download(path.join(parent, 'dest'));
    assert.match(error, message);
    assert.deepEqual(readdirSync(parent), ['sentinel'], 'nothing beside the destination, no .warren-download-* left');
    assert.deepEqual(symlinksUnder(scratch), [], 'no symlink anywhere on the host side');
  } finally {
    rmSync(parent, { recursive: true, force: true });
    await sh('rm -f /usr/local/bin/tar', 'root');
  }
}

for (const [how, archive, message] of framings) {
  test(`downloadDir refuses a hostile tar hiding s1 -> x/up/.. behind ${how}`, T, async () => {
    await hostileDownload(
      archive,
      (dest) =>
        sbx.files.downloadDir('/home/user/src', dest).then(
          () => 'accepted',
          (err: Error) => err.message,
        ),
      message,
    );
  });

  test(`warren cp -r refuses a hostile tar hiding s1 -> x/up/.. behind ${how}`, T, async () => {
    await hostileDownload(
      archive,
      async (dest) => {
        const r = runWarren(d as DaemonHandle, ['cp', '-r', `${sbx.id}:/home/user/src`, dest]);
        assert.notEqual(r.code, 0, `warren cp -r succeeded: ${r.stdout}`);
        return r.stderr;
      },
      message,
    );
  });
}

test('an upload hiding s1 -> x/up/.. behind a directory header with a size is a 400 that writes nothing', T, async () => {
  const [, archive, message] = framings[0] as [string, Buffer, RegExp];
  await sh('rm -rf /home/user/up && mkdir -p /home/user/up');
  const dh = d as DaemonHandle;
  const res = await fetch(`${dh.url}/v1/sandboxes/${sbx.id}/files/dir?path=${encodeURIComponent('/home/user/up/x')}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${dh.apiKey}`, 'content-type': 'application/x-tar' },
    body: new Uint8Array(archive),
  });
  const text = await res.text();
  assert.equal(res.status, 400, text);
  assert.match((JSON.parse(text) as { error: { message: string } }).error.message, message);
  assert.equal(await sh('ls -A /home/user/up | wc -l'), '0', 'nothing in the destination, no .warren-dir-* left');
  assert.equal(await sh('find /home/user /tmp -type l | wc -l'), '0', 'no symlink written anywhere');
});

test("a second merged download whose link would lead out through the first one's link is refused (SDK and CLI)", T, async () => {
  // The sandbox's own GNU tar, plain archives.
  await sh('rm -rf /home/user/m1 /home/user/m2 && mkdir /home/user/m1 /home/user/m2 && ln -s . /home/user/m1/d && ln -s d/d/d/../../.. /home/user/m2/e');
  const parent = mkdtempSync(path.join(tmpdir(), 'warren-sec-merge-'));
  try {
    const dest = path.join(parent, 'dest');
    await sbx.files.downloadDir('/home/user/m1', dest);
    assert.equal(readlinkSync(path.join(dest, 'd')), '.');
    const refused = /refused tar member "(?:\.\/)?e": symlink: its target "d\/d\/d\/\.\.\/\.\.\/\.\." has '\.\.' after a name/;
    await assert.rejects(sbx.files.downloadDir('/home/user/m2', dest), refused);
    const r = runWarren(d as DaemonHandle, ['cp', '-r', `${sbx.id}:/home/user/m2/.`, dest]);
    assert.notEqual(r.code, 0, `warren cp -r succeeded: ${r.stdout}`);
    assert.match(r.stderr, refused);
    assert.deepEqual(readdirSync(dest), ['d'], 'the destination is as the first download left it');
    assert.deepEqual(readdirSync(parent), ['dest'], 'no .warren-download-* left beside it');
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
});

test('the real tar still serves a download after the hostile one is gone', T, async () => {
  const dest = path.join(scratch, 'real');
  mkdirSync(scratch, { recursive: true });
  await sbx.files.downloadDir('/home/user/src', dest);
  assert.deepEqual(readdirSync(dest), ['file']);
});
