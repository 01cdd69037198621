/**
 * Security battery, files (docs/security.md): the files API acts as the calling user, so a
 * process of that user racing it, swapping every name it can for symlinks to /etc/shadow,
 * /etc and a root-only directory, never gets a file outside what the caller named written,
 * chowned, chmodded, created, moved or removed.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon();
});

after(async () => {
  await stopAndCheckClean(d);
});

/** Content hash, owner and mode of the files an attacker wants, and what /etc and the canary hold. */
const SNAPSHOT = `set -e
for f in /etc/shadow /etc/passwd /root/canary/secret; do echo "$f $(stat -c '%U:%G %a %s' $f) $(sha256sum < $f | cut -c1-16)"; done
echo "etc $(ls -A /etc | sha256sum | cut -c1-16) canary $(ls -A /root/canary | sha256sum | cut -c1-16)"`;

/**
 * Runs as user in the race directory: forever replaces the names the API calls use (and any
 * temporary file beside them) with symlinks to the targets, and the directory itself with a
 * symlink to /etc or the canary.
 */
const SWAPPER = `
import os, random, time
base = '/home/user/race'
targets = ['/etc/shadow', '/etc/passwd', '/root/canary/secret', '/etc', '/root/canary']
end = time.time() + 600
while time.time() < end:
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for n in names + ['up.bin', 'dir', 'moved', 'a']:
        p = os.path.join(base, n)
        try:
            if os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
            os.symlink(random.choice(targets), p)
        except OSError:
            pass
    # Sometimes the directory itself: the API then resolves race/... through the link.
    if random.random() < 0.2:
        try:
            os.rename(base, base + '.real')
            os.symlink(random.choice(['/etc', '/root/canary']), base)
            time.sleep(0.001)
            os.unlink(base)
            os.rename(base + '.real', base)
        except OSError:
            if not os.path.isdir(base) and not os.path.islink(base):
                try:
                    os.rename(base + '.real', base)
                except OSError:
                    os.makedirs(base, exist_ok=True)
`;

async function snapshot(sbx: Sandbox): Promise<string> {
  const r = await sbx.exec(SNAPSHOT, { user: 'root' });
  assert.equal(r.exitCode, 0, r.stderr);
  return r.stdout;
}

/** Runs an API call that may fail (the race makes most of them fail): only its effects count. */
async function attempt(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch {
    // a refusal is the expected outcome of a raced call
  }
}

test('files: uploads, downloads, mkdir, move and remove raced by a symlink swapper never touch a file outside what the caller named', T, async () => {
  const sbx = await d!.create();
  try {
    await sbx.exec('mkdir -p /root/canary && echo root-only > /root/canary/secret && chmod 700 /root/canary && chmod 600 /root/canary/secret', {
      user: 'root',
      check: true,
    });
    await sbx.exec('mkdir -p /home/user/race', { check: true });
    const before = await snapshot(sbx);
    await sbx.files.write('/home/user/swapper.py', SWAPPER);
    const swapper = await sbx.exec(['python3', '/home/user/swapper.py'], { background: true });
    const big = randomBytes(8 * 1024 * 1024);
    let calls = 0;
    const deadline = Date.now() + 60_000;
    for (let i = 0; Date.now() < deadline; i++) {
      const name = `/home/user/race/${i % 3 === 0 ? 'up.bin' : 'a'}`;
      // Mostly small calls, now and then a large upload that stays open for a while.
      await attempt(sbx.files.write(name, i % 25 === 0 ? big : `upload ${i}\n`, { mode: 0o644 }));
      await attempt(sbx.files.read(name));
      await attempt(sbx.files.mkdir('/home/user/race/dir/sub'));
      await attempt(sbx.files.move(name, '/home/user/race/moved'));
      await attempt(sbx.files.remove('/home/user/race/moved'));
      await attempt(sbx.files.remove('/home/user/race/dir'));
      calls += 6;
    }
    await swapper.kill();
    assert.ok(calls > 600, `only ${calls} calls raced the swapper`);
    assert.equal(await snapshot(sbx), before, 'a file outside what the caller named changed');
    // The canary dir is still root's alone, and nothing appeared in /etc with the user's name on it.
    const owned = await sbx.exec('find /etc /root -xdev -user user 2>/dev/null | head', { user: 'root' });
    assert.equal(owned.stdout, '', `files of user appeared under /etc or /root:\n${owned.stdout}`);
  } finally {
    await sbx.kill();
  }
});

test('files: an upload replacing another user’s file leaves a file of the caller; root keeps the owner', T, async () => {
  const sbx = await d!.create();
  try {
    await sbx.exec('install -o root -g root -m 666 /dev/null /home/user/shared.txt', { user: 'root', check: true });
    await sbx.files.write('/home/user/shared.txt', 'from user\n');
    assert.equal((await sbx.exec('stat -c "%U %a" /home/user/shared.txt')).stdout, 'user 666\n');
    await sbx.exec('chown root:root /home/user/shared.txt', { user: 'root', check: true });
    await sbx.files.write('/home/user/shared.txt', 'from root\n', { user: 'root' });
    assert.equal((await sbx.exec('stat -c "%U %a" /home/user/shared.txt')).stdout, 'root 666\n');
    // A directory the user may not write: refused, even though the file itself is writable.
    await sbx.exec('install -d -o root -m 755 /srv/ro && install -o root -m 666 /dev/null /srv/ro/f', { user: 'root', check: true });
    await assert.rejects(sbx.files.write('/srv/ro/f', 'x'), /may not|permission/i);
  } finally {
    await sbx.kill();
  }
});
