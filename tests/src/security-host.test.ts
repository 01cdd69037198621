/**
 * Security battery, the host boundary (docs/security.md): root inside a sandbox, in its own
 * namespaces and in a user namespace where it has remounted a mount read-write, cannot
 * change any host file it sees: the guest agent directory, the node binary, its template's
 * root filesystem, nor (in a template build step) the resolv.conf it is given. Each host
 * path a sandbox gets is inside a view that is read-only on the host, and `warren doctor`
 * says so.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { Template, type Sandbox } from '@warren/sdk';
import { REPO, TEMPLATES, containerOf, mountsUnder, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 240_000 };
const TEST_ROOT = '/var/lib/warren-test';
let d: DaemonHandle | undefined;
let tpl = '';

before(async () => {
  mkdirSync(TEST_ROOT, { recursive: true });
  // Its own templates dir (base linked in), so the build case adds nothing to the shared one.
  tpl = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  symlinkSync(realpathSync(path.join(TEMPLATES, 'base')), path.join(tpl, 'base'));
  d = await startDaemon({ env: { WARREN_TEMPLATES: tpl, WARREN_BAKE: '0' } });
});

after(async () => {
  try {
    await stopAndCheckClean(d);
  } finally {
    for (const m of mountsUnder(tpl)) spawnSync('umount', ['-l', m]);
    rmSync(tpl, { recursive: true, force: true });
  }
});

/** Content hash, mode, owner, size and times of every entry under (or at) p, by relative path. */
function fingerprint(p: string): Record<string, string> {
  const out: Record<string, string> = {};
  const visit = (abs: string, rel: string) => {
    const st = lstatSync(abs);
    const hash = st.isFile() ? createHash('sha256').update(readFileSync(abs)).digest('hex') : '';
    out[rel] = `${st.mode.toString(8)} ${st.uid}:${st.gid} ${st.size} ${st.mtimeMs} ${st.ctimeMs} ${hash}`;
    if (st.isDirectory()) for (const name of readdirSync(abs).sort()) visit(path.join(abs, name), `${rel}/${name}`);
  };
  visit(p, '.');
  return out;
}

/**
 * Tries every way of changing each target as root and prints one JSON object: per target,
 * per operation, 'ok' or the errno name. Operations that change the name come last and are
 * undone if they worked (they act on the sandbox's own overlay for rootfs files).
 */
const ATTACK = `
import errno, json, os, sys
def attempt(fn):
    try:
        fn()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(f, flags):
    fd = os.open(f, flags)
    try:
        os.write(fd, b'x')
    finally:
        os.close(fd)
result = {}
for f in sys.argv[1:]:
    d = os.path.dirname(f)
    probe = os.path.join(d, 'warren-probe')
    r = {}
    r['open-write'] = attempt(lambda: write(f, os.O_WRONLY))
    r['append'] = attempt(lambda: write(f, os.O_WRONLY | os.O_APPEND))
    r['truncate'] = attempt(lambda: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC)))
    r['create'] = attempt(lambda: os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644)))
    r['chmod'] = attempt(lambda: os.chmod(f, 0o777))
    r['chown'] = attempt(lambda: os.chown(f, 1000, 1000))
    r['setxattr'] = attempt(lambda: os.setxattr(f, 'user.warren', b'x'))
    r['utime'] = attempt(lambda: os.utime(f, (0, 0)))
    r['link'] = attempt(lambda: os.link(f, probe + '-link'))
    r['rename'] = attempt(lambda: os.rename(f, f + '.moved'))
    if r['rename'] == 'ok':
        os.rename(f + '.moved', f)
    r['unlink'] = attempt(lambda: os.unlink(f))
    result[f] = r
print(json.dumps(result))
`;

const GUEST_TARGETS = ['/opt/warren/lib/agent.cjs', '/opt/warren/lib/warren-init', '/opt/warren/lib/connect', '/opt/warren/bin/node'];
const ROOTFS_TARGET = '/usr/bin/true';

async function attack(sbx: Sandbox, inUserNamespace: boolean): Promise<Record<string, Record<string, string>>> {
  await sbx.files.write('/tmp/attack.py', ATTACK, { user: 'root' });
  const targets = [...GUEST_TARGETS, ROOTFS_TARGET].join(' ');
  // In a user namespace root may remount its own copies of the mounts read-write: the
  // Sentry then believes them writable, and only the host can still refuse.
  const cmd = inUserNamespace
    ? `unshare -Urm sh -c 'mount -o remount,rw,bind /opt/warren/lib && mount -o remount,rw,bind /opt/warren/bin/node && grep -E " /opt/warren/(lib|bin/node) " /proc/mounts >&2 && python3 /tmp/attack.py ${targets}'`
    : `python3 /tmp/attack.py ${targets}`;
  const r = await sbx.exec(['sh', '-c', cmd], { user: 'root' });
  assert.equal(r.exitCode, 0, r.stderr);
  if (inUserNamespace) {
    // The remount really happened: the attack ran against mounts the Sentry calls writable.
    assert.match(r.stderr, / \/opt\/warren\/lib 9p rw[, ]/, r.stderr);
    assert.match(r.stderr, / \/opt\/warren\/bin\/node 9p rw[, ]/, r.stderr);
  }
  return JSON.parse(r.stdout) as Record<string, Record<string, string>>;
}

test('host: root cannot change the guest files, node or its template on the host, in its own namespace or after a remount in a user namespace', T, async () => {
  const guestDir = path.join(d!.home, 'guest');
  const rootfs = realpathSync(path.join(tpl, 'base/current/rootfs'));
  const before = {
    guest: fingerprint(guestDir),
    node: fingerprint(realpathSync(process.execPath)),
    true: fingerprint(path.join(rootfs, ROOTFS_TARGET)),
    bin: readdirSync(path.join(rootfs, 'usr/bin')).length,
  };
  const sbx = await d!.create();
  try {
    for (const userns of [false, true]) {
      const results = await attack(sbx, userns);
      for (const target of GUEST_TARGETS) {
        for (const [op, outcome] of Object.entries(results[target] ?? {})) {
          // node is a file mount: its directory is the sandbox's own root filesystem.
          if (op === 'create' && target === '/opt/warren/bin/node') continue;
          // After a remount in a user namespace the Sentry answers chmod with success but
          // changes nothing, inside or on the host (the fingerprints below are the proof).
          if (op === 'chmod' && userns) continue;
          assert.notEqual(outcome, 'ok', `${userns ? 'in a user namespace, ' : ''}${op} on ${target} succeeded: ${JSON.stringify(results[target])}`);
        }
      }
      // The rootfs is the sandbox's own copy-on-write view: changing it is allowed, inside
      // (the first pass ends by unlinking it there).
      if (!userns) assert.equal(results[ROOTFS_TARGET]?.['open-write'], 'ok', JSON.stringify(results[ROOTFS_TARGET]));
    }
    assert.deepEqual(fingerprint(guestDir), before.guest, 'the guest directory changed on the host');
    assert.deepEqual(fingerprint(realpathSync(process.execPath)), before.node, 'the node binary changed on the host');
    assert.deepEqual(fingerprint(path.join(rootfs, ROOTFS_TARGET)), before.true, 'the template rootfs changed on the host');
    assert.equal(readdirSync(path.join(rootfs, 'usr/bin')).length, before.bin, 'a file appeared in the template rootfs');
    // Another sandbox still starts and runs the untouched agent.
    const next = await d!.create();
    try {
      assert.equal((await next.exec('echo alive', { check: true })).stdout, 'alive\n');
    } finally {
      await next.kill();
    }
  } finally {
    await sbx.kill();
  }
});

test('host: every host path in a sandbox OCI spec is inside a view that is read-only on the host', T, async () => {
  const sbx = await d!.create();
  try {
    const { dir } = containerOf(d!.home, sbx.id);
    const spec = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as { root: { path: string }; mounts: Array<{ type: string; source: string }> };
    const hostPaths = [spec.root.path, ...spec.mounts.filter((m) => m.type === 'bind').map((m) => m.source)];
    assert.ok(hostPaths.length >= 3, JSON.stringify(spec.mounts));
    const views = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .filter((f) => f[4]?.startsWith(`${d!.home}/views/`))
      .map((f) => ({ target: f[4]!, ro: f[5]!.split(',').includes('ro') }));
    for (const p of hostPaths) {
      const view = views.find((v) => p === v.target || p.startsWith(`${v.target}/`));
      assert.ok(view, `${p} is not inside a view under ${d!.home}/views (views: ${JSON.stringify(views)})`);
      assert.ok(view.ro, `${view.target} is mounted read-write on the host`);
    }
  } finally {
    await sbx.kill();
  }
});

test('host: a template build step cannot change the host resolv.conf it is given', T, async () => {
  const before = fingerprint('/etc/resolv.conf');
  // Every attempt runs in its own shell, so a refused one does not end the step.
  const attempts = ['sh -c ": > /etc/resolv.conf"', 'sh -c "echo x >> /etc/resolv.conf"', 'chmod 666 /etc/resolv.conf', 'rm -f /etc/resolv.conf'];
  const probe = [
    ...attempts.map((a) => `(${a}) 2>&1 || true`),
    `unshare -Urm sh -c 'mount -o remount,rw,bind /etc/resolv.conf; grep " /etc/resolv.conf " /proc/mounts; ${attempts.map((a) => `(${a}) 2>&1`).join('; ')}; true'`,
  ].join('\n');
  const lines: string[] = [];
  await Template.buildRecipe(
    { name: 'sec-resolv', from: 'base', steps: [{ type: 'run', cmd: probe, user: 'root' }] },
    { ...d!.conn, onEvent: (e) => e.type === 'log' && lines.push(e.line) },
  );
  assert.match(lines.join('\n'), /\/etc\/resolv\.conf 9p rw/, `the step did not get a read-write remount to attack:\n${lines.join('\n')}`);
  assert.deepEqual(fingerprint('/etc/resolv.conf'), before, `the host's resolv.conf changed:\n${lines.join('\n')}`);
  await Template.delete('sec-resolv', d!.conn);
});

test('host: warren doctor checks that each view is mounted read-only, and fails when one is not', T, async () => {
  const doctor = () =>
    spawnSync(path.join(REPO, 'bin/warren'), ['doctor'], {
      encoding: 'utf8',
      env: { ...process.env, WARREN_HOME: d!.home, WARREN_TEMPLATES: tpl, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
    });
  const ok = doctor();
  for (const view of ['guest', 'templates', 'node']) {
    assert.match(ok.stdout, new RegExp(`ok +read-only view ${d!.home}/views/${view}: read-only bind mount`), ok.stdout);
  }
  const guestView = path.join(d!.home, 'views/guest');
  assert.ok(existsSync(guestView));
  spawnSync('mount', ['-o', 'remount,bind,rw', guestView]);
  try {
    const bad = doctor();
    assert.notEqual(bad.status, 0, bad.stdout);
    assert.match(bad.stdout, new RegExp(`FAIL +read-only view ${guestView}: mounted read-write`), bad.stdout);
  } finally {
    spawnSync('mount', ['-o', 'remount,bind,ro', guestView]);
  }
});
