/**
 * Fast by default (docs/fast-creates.md): a daemon started with no settings bakes the default
 * template (`base`) in the background and keeps a warm pool of it, so a create with no
 * options is a pool claim. Every other test daemon runs with the pool off and bakes only
 * templates with a start command (harness TEST_DEFAULTS); this file runs the real defaults
 * ('' gives the daemon's own default). The daemon builds into its own templates dir, where
 * `base` links to the machine's base template. Nothing here leaves the host.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { bake, getBake, getPool, Sandbox, setPoolSize, Template } from '@warren/sdk';
import { TEMPLATES, allRunscContainers, containerOf, eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const TEST_ROOT = '/var/lib/warren-test';
const T = { timeout: 240_000 };
/** The daemon's own defaults: no WARREN_DEFAULT_POOL, WARREN_BAKE unset. */
const REAL_DEFAULTS = { WARREN_DEFAULT_POOL: '', WARREN_BAKE: '' };
let d: DaemonHandle | undefined;
let tplDir: string;
let ctx: string;

/** The host CPU weight (cgroup v1 cpu.shares) of a runsc container. */
function cpuShares(container: string): number {
  return Number(readFileSync(`/sys/fs/cgroup/cpu/warren/${container}/cpu.shares`, 'utf8'));
}

before(async () => {
  mkdirSync(TEST_ROOT, { recursive: true });
  tplDir = mkdtempSync(path.join(TEST_ROOT, 'tpl-'));
  ctx = mkdtempSync(path.join(TEST_ROOT, 'ctx-'));
  symlinkSync(realpathSync(path.join(TEMPLATES, 'base')), path.join(tplDir, 'base'));
  d = await startDaemon({ env: { WARREN_TEMPLATES: tplDir, ...REAL_DEFAULTS } });
});

after(async () => {
  try {
    await stopAndCheckClean(d);
  } finally {
    rmSync(tplDir, { recursive: true, force: true });
    rmSync(ctx, { recursive: true, force: true });
  }
});

test('with default settings the daemon bakes base and fills its warm pool; members are nobody’s sandboxes', T, async () => {
  const sized = await d!.waitForLog((e) => e.msg === 'default template: warm pool size unless set', 5_000, 'the default pool size');
  // Sized by MemAvailable: this test machine has far more than the 5 GB it takes.
  assert.equal(sized.size, 2, `default pool size: ${String(sized.why)}`);
  await eventually(async () => (await getBake('base', d!.conn)).state === 'ready', 120_000, 'base baked');
  const pool = await eventually(
    async () => {
      const p = await getPool('base', d!.conn);
      return p.ready === 2 ? p : undefined;
    },
    120_000,
    'default pool of base filled',
  );
  assert.equal(pool.size, 2);
  assert.equal(pool.bootFailures, 0, pool.lastError);
  // Pool members wait outside the registry: the user has no sandboxes yet.
  assert.deepEqual(await Sandbox.list(d!.conn), []);
  // They boot and wait at a low host CPU weight, below the sandboxes that serve requests, and
  // so do the shells made ahead for restores (unowned shell- containers).
  const containers = allRunscContainers(d!.home);
  const members = containers.filter((c) => !c.startsWith('shell-') || existsSync(path.join(d!.home, 'shells', c, 'sandbox')));
  assert.equal(members.length, 2, `containers: ${containers.join(' ')}`);
  assert.deepEqual(
    containers.map(cpuShares),
    containers.map(() => 16),
    `cpu.shares of ${containers.join(' ')}`,
  );
});

test('a create with no options claims a pool member; with the pool empty it restores the baked image', T, async () => {
  await eventually(async () => (await getPool('base', d!.conn)).ready >= 1, 120_000, 'a ready member');
  const pooled = await Sandbox.create({ ...d!.conn });
  try {
    assert.equal(pooled.info.template, 'base');
    assert.equal(pooled.info.boot, 'pool');
    assert.equal(cpuShares(containerOf(d!.home, pooled.id).id), 1024, 'a claimed member has the normal CPU weight');
    assert.equal((await pooled.exec('echo $(hostname)', { check: true })).stdout.trim(), pooled.id);
    assert.deepEqual(
      (await Sandbox.list(d!.conn)).map((s) => s.id),
      [pooled.id],
    );
  } finally {
    await pooled.kill();
  }
  // Turned off by hand: the pool empties, the image stays.
  await setPoolSize('base', 0, d!.conn);
  await eventually(async () => (await getPool('base', d!.conn)).ready === 0, 30_000, 'pool emptied');
  const baked = await Sandbox.create({ ...d!.conn });
  try {
    assert.equal(baked.info.boot, 'baked');
    assert.equal((await baked.exec('echo ok', { check: true })).stdout, 'ok\n');
  } finally {
    await baked.kill();
  }
});

test('a size set by hand (even 0) outlasts a restart; the default applies only to pools nobody set', T, async () => {
  await setPoolSize('base', 0, d!.conn);
  await d!.stop();
  d = await startDaemon({ home: d!.home, env: { WARREN_TEMPLATES: tplDir, ...REAL_DEFAULTS } });
  const p = await getPool('base', d.conn);
  assert.equal(p.size, 0);
  await setPoolSize('base', 1, d.conn);
  await eventually(async () => (await getPool('base', d!.conn)).ready === 1, 120_000, 'pool of 1 ready');
});

test('a recipe with bake: false is never baked, and says why', T, async () => {
  await Template.from('base')
    .run('true')
    .bake(false)
    .build({ ...d!.conn, name: 'nobake', contextDir: ctx });
  const info = await getBake('nobake', d!.conn);
  assert.equal(info.state, 'none');
  assert.match(info.reason ?? '', /bake: false/);
  assert.equal((await bake('nobake', d!.conn)).state, 'none');
  const sbx = await d!.create({ template: 'nobake' });
  try {
    assert.equal(sbx.info.boot, 'cold');
  } finally {
    await sbx.kill();
  }
  assert.equal((await getBake('nobake', d!.conn)).state, 'none', 'a create does not queue a bake either');
});

test('WARREN_DEFAULT_POOL=0: no default pool, base is still baked', T, async () => {
  const off = await startDaemon({ env: { WARREN_TEMPLATES: tplDir, ...REAL_DEFAULTS, WARREN_DEFAULT_POOL: '0' } });
  try {
    await eventually(async () => (await getBake('base', off.conn)).state === 'ready', 120_000, 'base baked');
    const p = await getPool('base', off.conn);
    assert.equal(p.size, 0);
    assert.equal(p.ready + p.booting, 0);
    const sbx = await Sandbox.create({ ...off.conn });
    assert.equal(sbx.info.boot, 'baked');
    await sbx.kill();
  } finally {
    await stopAndCheckClean(off);
  }
});

test('a bad WARREN_DEFAULT_POOL stops the daemon at start with a message naming it', T, async () => {
  for (const bad of ['two', '-1', '1.5', '65']) {
    const home = mkdtempSync(path.join(TEST_ROOT, 'home-'));
    try {
      await assert.rejects(
        startDaemon({ home, env: { WARREN_TEMPLATES: tplDir, WARREN_DEFAULT_POOL: bad } }),
        new RegExp(`WARREN_DEFAULT_POOL must be a whole number from 0 to 64 .*got '${bad.replace('.', '\\.')}'`),
      );
    } finally {
      rmSync(home, { recursive: true, force: true });
      rmSync(`${home}.log`, { force: true });
    }
  }
});
