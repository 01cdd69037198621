/**
 * Snapshot, fork and hibernate against a real daemon and real gVisor checkpoints: in-memory
 * state (an HTTP server's counter, a python variable) continues after hibernate/resume and
 * in every fork child; files survive 20 hibernate cycles; forks are independent of each
 * other and of their parent; idle sandboxes hibernate by themselves, busy ones do not;
 * hibernated time is not billed; snapshots outlive a daemon restart; a daemon killed in the
 * middle of a hibernate or a fork leaves every sandbox whole. Nothing leaves 127.0.0.1: the
 * servers listen inside the sandboxes and are reached with curl there.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import path from 'node:path';
import { getUsage, Sandbox, Snapshots, Template, type WarrenError, type ProcessHandle } from '@warren/sdk';
import { REPO, eventually, runscContainers, sleep, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 300_000 };
const MAX_FORK = 4;
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon({ env: { WARREN_MAX_FORK: String(MAX_FORK) } });
});

after(async () => {
  await stopAndCheckClean(d);
  if (d) assert.deepEqual(leftImages(d.home), [], 'hibernation and fork images left behind');
});

function leftImages(home: string): string[] {
  const out: string[] = [];
  for (const kind of ['hibernated', 'forks', 'restores']) {
    const dir = path.join(home, 'images', kind);
    if (existsSync(dir)) out.push(...readdirSync(dir).map((n) => `${kind}/${n}`));
  }
  return out;
}

const COUNTER_SERVER = `require('http').createServer((q, s) => s.end(String(++n))).listen(3000, '127.0.0.1'); let n = 0;`;
const PYTHON_HOLDER = 'import sys, random\nv = random.randrange(10**12)\nfor line in sys.stdin:\n    print(v, line.strip(), flush=True)\n';

interface Stateful {
  sbx: Sandbox;
  python: ProcessHandle;
}

/** A sandbox running a node HTTP counter on :3000 and a python process holding a random number. */
async function statefulSandbox(): Promise<Stateful> {
  const sbx = await d!.create();
  await sbx.exec(['node', '-e', COUNTER_SERVER], { background: true, tag: 'counter' });
  const python = await sbx.exec(['python3', '-u', '-c', PYTHON_HOLDER], { background: true, keepStdinOpen: true, tag: 'holder' });
  await eventually(async () => (await sbx.exec(['curl', '-sf', 'http://127.0.0.1:3000/'])).exitCode === 0, 20_000, 'counter server up');
  return { sbx, python };
}

async function count(sbx: Sandbox): Promise<number> {
  return Number((await sbx.exec(['curl', '-sf', 'http://127.0.0.1:3000/'], { check: true })).stdout);
}

/** Asks the python process (by pid, in whichever sandbox) to echo its number with a word. */
async function pythonSays(sbx: Sandbox, pid: number, word: string): Promise<string | undefined> {
  const proc = sbx.processes.get(pid);
  await proc.sendStdin(`${word}\n`);
  return eventually(
    async () => {
      const out = await proc.output();
      const line = out.stdout.split('\n').find((l) => l.endsWith(` ${word}`));
      return line?.split(' ')[0];
    },
    20_000,
    `python answering ${word}`,
  );
}

function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The runsc image directory of a hibernated sandbox. */
function imageDir(id: string, home = d!.home): string {
  return path.join(home, 'images', 'hibernated', id, 'image');
}

function duBytes(p: string): number {
  return Number(execFileSync('du', ['-s', '--block-size=1', p], { encoding: 'utf8' }).split('\t')[0]);
}

function containerOf(id: string): boolean {
  return runscContainers(d!.home).includes(id);
}

test('hibernate frees the host and resume continues memory, processes and files', T, async () => {
  const { sbx, python } = await statefulSandbox();
  try {
    assert.equal(await count(sbx), 2); // the readiness probe was 1
    const v = await pythonSays(sbx, python.pid, 'before');
    await sbx.files.write('notes.txt', 'kept across hibernation\n');

    const info = await sbx.hibernate();
    assert.equal(info.state, 'hibernated');
    assert.equal(containerOf(sbx.id), false, 'a hibernated sandbox holds no runsc container');
    const asleep = await sbx.refresh();
    assert.equal(asleep.state, 'hibernated');
    // The memory file is kept packed, and the size shown is what the disk really holds.
    const image = imageDir(sbx.id);
    assert.deepEqual(readdirSync(image).sort(), ['checkpoint.img', 'pages.img.zst', 'pages_meta.img']);
    const diskBytes = (await Sandbox.connect(sbx.id, d!.conn)).info.diskBytes!;
    assert.ok(diskBytes > 1_000_000, `info shows the image size: ${diskBytes}`);
    // du counts the two directories' blocks too; diskBytes counts the files.
    const du = duBytes(path.dirname(image));
    assert.ok(Math.abs(du - diskBytes) <= 2 * 4096, `diskBytes ${diskBytes} is the allocated size of the image (du ${du})`);
    assert.equal((await sbx.hibernate()).state, 'hibernated', 'hibernating twice is a no-op');

    // Any call resumes it transparently.
    assert.equal(await count(sbx), 3);
    assert.equal((await sbx.refresh()).state, 'running');
    assert.equal(containerOf(sbx.id), true);
    assert.equal(await pythonSays(sbx, python.pid, 'after'), v, 'the python variable survived');
    assert.equal(await sbx.files.readText('notes.txt'), 'kept across hibernation\n');
    const procs = await sbx.processes.list();
    assert.deepEqual(
      procs
        .filter((p) => p.running)
        .map((p) => p.tag)
        .sort(),
      ['counter', 'holder'],
    );

    // Explicit resume of a running sandbox changes nothing.
    assert.equal((await sbx.resume()).state, 'running');
    assert.equal(await count(sbx), 4);
  } finally {
    await sbx.kill();
  }
});

test('20 hibernate/resume cycles keep every file exactly', T, async () => {
  const sbx = await d!.create();
  try {
    await sbx.files.mkdir('cycle');
    const written = new Map<string, string>();
    for (let cycle = 1; cycle <= 20; cycle++) {
      const body = randomBytes(1024 + cycle * 997);
      await sbx.files.write(`cycle/f${cycle}.bin`, body);
      written.set(`f${cycle}.bin`, sha256(body));
      // Change an earlier file too, so later cycles carry rewritten data.
      if (cycle > 1) {
        const again = randomBytes(513 * cycle);
        await sbx.files.write(`cycle/f${cycle - 1}.bin`, again);
        written.set(`f${cycle - 1}.bin`, sha256(again));
      }
      await sbx.hibernate();
      const r = await sbx.exec('cd cycle && sha256sum *.bin', { check: true });
      const sums = new Map(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => l.split(/\s+/).reverse() as [string, string]),
      );
      assert.equal(sums.size, written.size, `cycle ${cycle}: file count`);
      for (const [name, sum] of written) assert.equal(sums.get(name), sum, `cycle ${cycle}: ${name}`);
    }
  } finally {
    await sbx.kill();
  }
});

test('fork: children continue from the same instant and are independent', T, async () => {
  const { sbx: parent, python } = await statefulSandbox();
  try {
    assert.equal(await count(parent), 2);
    const v = await pythonSays(parent, python.pid, 'parent');
    await parent.files.write('shared.txt', 'from the parent\n');

    const children = await parent.forkTree(3, { metadata: { attempt: 'x' } });
    assert.equal(children.length, 3);
    assert.equal(new Set(children.map((c) => c.id)).size, 3);
    for (const c of children) {
      assert.notEqual(c.id, parent.id);
      assert.equal(c.info.boot, 'fork');
      assert.equal(c.info.source, parent.id);
      assert.deepEqual(c.info.metadata, { attempt: 'x' });
      assert.equal(c.info.state, 'running');
      // Same instant: every child's counter goes on from the parent's 2.
      assert.equal(await count(c), 3);
      assert.equal(await pythonSays(c, python.pid, `child-${c.id}`), v);
      assert.equal(await c.files.readText('shared.txt'), 'from the parent\n');
      assert.equal((await c.exec('hostname', { check: true })).stdout.trim(), c.id);
      // Its own name resolves, the parent's no longer does.
      assert.equal((await c.exec(`getent hosts ${c.id}; getent hosts ${parent.id} || echo gone`)).stdout, `127.0.1.1       ${c.id}\ngone\n`);
    }
    // The parent carried on, untouched by its children's calls.
    assert.equal(await count(parent), 3);

    const [child0, child1, child2] = children;
    assert.ok(child0 && child1 && child2);
    await child0.files.write('mine.txt', 'only in child 0\n');
    await child0.exec('rm shared.txt', { check: true });
    for (const other of [parent, child1, child2]) {
      assert.equal(await other.files.exists('mine.txt'), false, `${other.id} sees child 0's write`);
      assert.equal(await other.files.exists('shared.txt'), true, `${other.id} lost a file child 0 removed`);
    }

    await parent.kill();
    for (const c of children) assert.equal(await count(c), 4, 'children keep running after the parent is killed');
    await Promise.all(children.map((c) => c.kill()));
  } finally {
    await parent.kill().catch(() => undefined);
  }
});

test('fork refuses bad input and keeps nothing half made', T, async () => {
  const sbx = await d!.create();
  try {
    await assert.rejects(sbx.forkTree(MAX_FORK + 1), (e: WarrenError) => e.status === 400 && /at most 4 children/.test(e.message));
    await assert.rejects(sbx.forkTree(0), (e: WarrenError) => e.status === 400 && /count/.test(e.message));
    const res = await fetch(`${d!.url}/v1/sandboxes/${sbx.id}/fork`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
      body: '{"count": 1, "colour": "red"}',
    });
    assert.equal(res.status, 400);
    assert.equal((await Sandbox.list(d!.conn)).length, 1, 'no child registered by refused forks');

    // A hibernated parent forks from its image without waking up.
    await sbx.exec('echo asleep > state.txt', { check: true });
    await sbx.hibernate();
    const [child] = await sbx.forkTree(1);
    assert.ok(child);
    assert.equal(await child.files.readText('state.txt'), 'asleep\n');
    assert.equal((await sbx.refresh()).state, 'hibernated');
    await child.kill();
  } finally {
    await sbx.kill();
  }
  await assert.rejects(sbx.forkTree(1), (e: WarrenError) => e.status === 404);
  await assert.rejects(sbx.snapshot(), (e: WarrenError) => e.status === 404);
  await assert.rejects(sbx.hibernate(), (e: WarrenError) => e.status === 404);
});

test('a disk too small for the image, or an image that cannot be restored, harms no one and leaves nothing', T, async () => {
  // A daemon whose whole home is a 48 MB tmpfs: the image of a sandbox holding 100 MB
  // cannot be written there.
  const mnt = mkdtempSync('/var/lib/warren-test/small-');
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', mnt]);
  let small: DaemonHandle | undefined;
  try {
    small = await startDaemon({ home: path.join(mnt, 'home') });
    const parent = await small.create();
    const hog = await parent.exec(
      [
        'python3',
        '-c',
        "b = bytearray(100 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('touched', flush=True)\nimport time; time.sleep(600)",
      ],
      { background: true },
    );
    await parent.exec(['node', '-e', COUNTER_SERVER], { background: true });
    await eventually(async () => (await parent.exec(['curl', '-sf', 'http://127.0.0.1:3000/'])).exitCode === 0, 20_000, 'counter server up');
    await eventually(async () => (await hog.output()).stdout === 'touched\n', 20_000, 'python to have touched its 100 MB');
    await assert.rejects(parent.forkTree(2), (e: WarrenError) => e.status === 429 && /not enough disk/.test(e.message));
    await assert.rejects(
      parent.hibernate(),
      (e: WarrenError) => e.status === 429 && /not enough disk.*keeps running|keeps running.*not enough disk/.test(e.message),
    );
    await assert.rejects(parent.snapshot(), (e: WarrenError) => e.status === 429 && /not enough disk/.test(e.message));
    // The parent is unharmed and running; nothing half made is registered or left on disk.
    assert.equal((await parent.refresh()).state, 'running');
    assert.equal(await count(parent), 2);
    assert.deepEqual(
      (await Sandbox.list(small.conn)).map((s) => s.id),
      [parent.id],
    );
    assert.deepEqual(await Snapshots.list(small.conn), []);
    assert.deepEqual(leftImages(small.home), []);
    assert.deepEqual(runscContainers(small.home), [parent.id]);
  } finally {
    try {
      await stopAndCheckClean(small);
    } finally {
      execFileSync('umount', [mnt]);
      rmSync(mnt, { recursive: true, force: true });
    }
  }

  // An image that cannot be restored: the create says why and leaves nothing registered.
  const sbx = await d!.create();
  try {
    const snap = await sbx.snapshot();
    truncateSync(path.join(d!.home, 'images', 'snapshots', snap.id, 'image', 'checkpoint.img'), 100);
    const before = (await Sandbox.list(d!.conn)).map((s) => s.id);
    await assert.rejects(d!.create({ snapshot: snap.id }), (e: WarrenError) => e.status === 500 && /runsc could not start/.test(e.message));
    assert.deepEqual(
      (await Sandbox.list(d!.conn)).map((s) => s.id),
      before,
    );
    assert.deepEqual(runscContainers(d!.home).sort(), [...before].sort());
    await Snapshots.delete(snap.id, d!.conn);
  } finally {
    await sbx.kill();
  }
});

test('a damaged packed hibernation image: the sandbox is reported dead with the reason, nothing is left', T, async () => {
  const truncated = await d!.create();
  const corrupt = await d!.create();
  const survivor = await d!.create();
  try {
    for (const s of [truncated, corrupt, survivor]) await s.hibernate();
    const packed = (s: Sandbox) => path.join(imageDir(s.id), 'pages.img.zst');
    truncateSync(packed(truncated), Math.floor(readFileSync(packed(truncated)).length / 2));
    // Bytes changed in the middle: zstd's checksum catches what the frame format does not.
    const fd = openSync(packed(corrupt), 'r+');
    writeSync(fd, randomBytes(64), 0, 64, Math.floor(readFileSync(packed(corrupt)).length / 2));
    closeSync(fd);
    for (const s of [truncated, corrupt]) {
      await assert.rejects(s.exec('true'), (e: WarrenError) => e.status === 404 && /hibernation image is damaged/.test(e.message), `${s.id} resumed`);
      const info = await s.refresh();
      assert.equal(info.state, 'dead');
      assert.match(info.error ?? '', /hibernation image is damaged/);
      assert.equal(containerOf(s.id), false);
      assert.equal(existsSync(path.dirname(imageDir(s.id))), false, 'a dead sandbox keeps no image');
    }
    // The others are unharmed.
    assert.equal((await survivor.exec('echo ok', { check: true })).stdout, 'ok\n');
  } finally {
    await Promise.all([truncated, corrupt, survivor].map((s) => s.kill().catch(() => undefined)));
  }
});

test('an image left half packed by a kill -9 still resumes, and snapshots of it restore', T, async () => {
  const sbx = await d!.create();
  await sbx.exec('echo kept > kept.txt', { check: true });
  await sbx.hibernate();
  // What a daemon killed while packing leaves: the unpacked file and a partial .zst.tmp (the
  // .zst itself appears only complete and synced, by rename).
  await d!.crash();
  const image = imageDir(sbx.id);
  execFileSync('zstd', ['-d', '-q', '-f', '-o', path.join(image, 'pages.img'), path.join(image, 'pages.img.zst')]);
  writeFileSync(path.join(image, 'pages.img.zst.tmp'), readFileSync(path.join(image, 'pages.img.zst')).subarray(0, 1000));
  unlinkSync(path.join(image, 'pages.img.zst'));
  d = await startDaemon({ home: d!.home, env: { WARREN_MAX_FORK: String(MAX_FORK) } });
  const again = await Sandbox.connect(sbx.id, d.conn);
  assert.equal(again.info.state, 'hibernated');
  const snap = await again.snapshot();
  const restored = await d.create({ snapshot: snap.id });
  try {
    assert.equal(await restored.files.readText('kept.txt'), 'kept\n', 'a snapshot of the half-packed image restores');
    assert.equal(await again.files.readText('kept.txt'), 'kept\n', 'the half-packed image resumes');
    // Packed again at the next hibernate, from a clean slate.
    await again.hibernate();
    assert.deepEqual(readdirSync(imageDir(sbx.id)).sort(), ['checkpoint.img', 'pages.img.zst', 'pages_meta.img']);
    const fromPacked = await again.snapshot();
    const second = await d.create({ snapshot: fromPacked.id });
    assert.equal(await second.files.readText('kept.txt'), 'kept\n', 'a snapshot of a packed image restores');
    await second.kill();
    await Snapshots.delete(fromPacked.id, d.conn);
  } finally {
    await restored.kill();
    await again.kill();
    await Snapshots.delete(snap.id, d.conn);
  }
});

test('kill -9 of the daemon while it packs or unpacks a hibernation image loses nothing', T, async () => {
  // 100 MB of random memory: packing and unpacking it take long enough to be cut.
  const HOLD =
    'import sys, os, hashlib\nb = os.urandom(100 * 1024 * 1024)\nprint(hashlib.sha256(b).hexdigest(), "ready", flush=True)\n' +
    'for line in sys.stdin:\n    print(hashlib.sha256(b).hexdigest(), line.strip(), flush=True)\n';
  const sbx = await d!.create();
  const holder = await sbx.exec(['python3', '-u', '-c', HOLD], { background: true, keepStdinOpen: true });
  const hash = await eventually(async () => /^(\w+) ready$/m.exec((await holder.output()).stdout)?.[1], 60_000, 'python to hold its 100 MB');
  const image = imageDir(sbx.id);
  const restores = path.join(d!.home, 'images', 'restores');
  const unpacking = () => (existsSync(restores) ? readdirSync(restores).some((r) => existsSync(path.join(restores, r, 'image', 'pages.img'))) : false);

  // Cut while zstd writes pages.img.zst.tmp.
  void sbx.hibernate().catch(() => undefined);
  await eventually(() => existsSync(path.join(image, 'pages.img.zst.tmp')), 60_000, 'packing to begin', 5);
  await d!.crash();
  d = await startDaemon({ home: d!.home, env: { WARREN_MAX_FORK: String(MAX_FORK) } });
  const again = await Sandbox.connect(sbx.id, d.conn);
  assert.equal(again.info.state, 'hibernated', 'cut while packing: still hibernated');
  assert.equal(await pythonSays(again, holder.pid, 'after-pack-cut'), hash, 'cut while packing: memory intact');

  // Cut while a resume unpacks the (now packed) image into its scratch copy.
  await again.hibernate();
  assert.ok(existsSync(path.join(image, 'pages.img.zst')));
  void again.exec('true').catch(() => undefined);
  await eventually(unpacking, 60_000, 'unpacking to begin', 5);
  await d.crash();
  d = await startDaemon({ home: d.home, env: { WARREN_MAX_FORK: String(MAX_FORK) } });
  assert.deepEqual(existsSync(restores) ? readdirSync(restores) : [], [], 'scratch copies are cleared at start');
  const third = await Sandbox.connect(sbx.id, d.conn);
  assert.ok(third.info.state === 'hibernated' || third.info.state === 'running', `cut while unpacking: ${third.info.state}`);
  assert.equal(await pythonSays(third, holder.pid, 'after-unpack-cut'), hash, 'cut while unpacking: memory intact');
  await third.kill();
});

test('hibernate is refused while a call streams; auto-hibernate waits for idleness, not for commands', T, async () => {
  const busy = await d!.create({ idleSeconds: 2 });
  const idle = await d!.create({ idleSeconds: 2 });
  try {
    // A streaming exec holds the channel: an explicit hibernate says why it cannot. The
    // command runs until the test lets it go.
    let started: () => void = () => undefined;
    const streaming = new Promise<void>((resolve) => (started = resolve));
    const running = busy.exec('echo started; until [ -e go ]; do sleep 0.05; done; echo done', {
      onStdout: (chunk) => chunk.includes('started') && started(),
    });
    await Promise.race([streaming, running.then((r) => assert.fail(`the command ended before it was let go: ${JSON.stringify(r)}`))]);
    await assert.rejects(busy.hibernate(), (e: WarrenError) => e.status === 409 && /in progress/.test(e.message));
    await busy.files.write('go', '');
    assert.equal((await running).stdout, 'started\ndone\n');

    // A background command counts as work in progress, with no API call for a while.
    await busy.exec(['sleep', '25'], { background: true });
    await eventually(async () => (await idle.refresh()).state === 'hibernated', 30_000, 'idle sandbox hibernated by itself');
    assert.equal(containerOf(idle.id), false);
    assert.equal((await busy.refresh()).state, 'running', 'a sandbox running a command must not hibernate');
    // It wakes on the next call, as if nothing happened.
    assert.equal((await idle.exec('echo awake', { check: true })).stdout, 'awake\n');
  } finally {
    await Promise.all([busy.kill(), idle.kill()]);
  }
});

test('a hibernated sandbox still expires at its TTL, and its image goes with it', T, async () => {
  const sbx = await d!.create({ ttlSeconds: 4 });
  await sbx.hibernate();
  assert.ok(existsSync(path.join(d!.home, 'images', 'hibernated', sbx.id)));
  await eventually(async () => (await Sandbox.list(d!.conn)).every((s) => s.id !== sbx.id), 20_000, 'hibernated sandbox reaped at its ttl');
  assert.equal(existsSync(path.join(d!.home, 'images', 'hibernated', sbx.id)), false);
  await assert.rejects(sbx.exec('true'), (e: WarrenError) => e.status === 404);
});

test('usage: hibernated time is free', T, async () => {
  const since = new Date();
  const sbx = await d!.create({ resources: { cpus: 1, memoryMB: 1024 } });
  const billed = async () => (await getUsage({ since }, d!.conn)).sandboxes.find((s) => s.sandboxId === sbx.id);
  let asleep = 0;
  try {
    await sbx.hibernate();
    const hibernatedAt = Date.now();
    const stopped = await billed();
    assert.ok(stopped && !stopped.active, `billing stops when the sandbox is hibernated: ${JSON.stringify(stopped)}`);
    // Not billing is not an event: some time has to pass for it to show. The intervals are
    // exact (ms), so a second is plenty against the bound below.
    await sleep(1000);
    assert.equal((await billed())?.activeSeconds, stopped.activeSeconds, 'a hibernated sandbox accrues nothing');
    const wakingAt = Date.now();
    asleep = (wakingAt - hibernatedAt) / 1000;
    await sbx.exec('true', { check: true });
  } finally {
    await sbx.kill();
  }
  const lived = (Date.now() - since.getTime()) / 1000;
  const row = await billed();
  assert.ok(row, 'the sandbox is in the usage report');
  // Billing stopped before the hibernate returned and started again after the exec was sent.
  assert.ok(row.activeSeconds <= lived - asleep + 0.01, `billed ${row.activeSeconds}s of ${lived.toFixed(3)}s lived, ${asleep.toFixed(3)} of them hibernated`);
  assert.ok(row.activeSeconds > 0.1);
  assert.ok(Math.abs(row.vcpuSeconds - row.activeSeconds) < 0.01, 'one vCPU');
  assert.ok(Math.abs(row.gibSeconds - row.activeSeconds) < 0.01, 'one GiB');
});

test('snapshots: create from one, list, survive a daemon restart, protect their template', T, async () => {
  const { sbx } = await statefulSandbox();
  let restored: Sandbox | undefined;
  try {
    assert.equal(await count(sbx), 2);
    await sbx.files.write('snap.txt', 'in the snapshot\n');
    const snap = await sbx.snapshot({ metadata: { label: 'warm' } });
    assert.match(snap.id, /^snap-/);
    assert.equal(snap.sandboxId, sbx.id);
    assert.ok(snap.sizeBytes > 1_000_000, `size ${snap.sizeBytes}`);
    assert.deepEqual(snap.metadata, { label: 'warm' });
    assert.equal((await sbx.refresh()).state, 'running', 'the sandbox keeps running');
    assert.equal(await count(sbx), 3);

    // The template cannot go while a snapshot needs it.
    await assert.rejects(Template.delete('base', d!.conn), (e: WarrenError) => e.status === 409 && e.message.includes(snap.id));

    // Restart the daemon: the snapshot is still there and still restores.
    await d!.stop();
    d = await startDaemon({ home: d!.home, env: { WARREN_MAX_FORK: String(MAX_FORK) } });
    assert.deepEqual(
      (await Snapshots.list(d.conn)).map((s) => s.id),
      [snap.id],
    );
    restored = await d.create({ snapshot: snap.id });
    assert.equal(restored.info.boot, 'snapshot');
    assert.equal(restored.info.source, snap.id);
    assert.equal(await count(restored), 3, 'the counter continues from the snapshot');
    assert.equal(await restored.files.readText('snap.txt'), 'in the snapshot\n');

    await Snapshots.delete(snap.id, d.conn);
    assert.deepEqual(await Snapshots.list(d.conn), []);
    await assert.rejects(d.create({ snapshot: snap.id }), (e: WarrenError) => e.status === 404);
    await assert.rejects(d.create({ snapshot: 'not a snapshot' }), (e: WarrenError) => e.status === 400);
    await assert.rejects(Snapshots.delete(snap.id, d.conn), (e: WarrenError) => e.status === 404);
  } finally {
    await restored?.kill();
    await (await Sandbox.connect(sbx.id, d!.conn)).kill();
  }
});

test('CLI: hibernate, resume, fork, snapshot create/ls/rm', T, async () => {
  // Not spawnSync: a blocked event loop keeps the SDK's idle keep-alive socket past the
  // daemon's timeout, and the next test's first request would meet a closed connection.
  const run = promisify(execFile);
  const warren = async (...args: string[]) => {
    const r = await run(path.join(REPO, 'bin/warren'), args, {
      encoding: 'utf8',
      env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
      timeout: 120_000,
    });
    return r.stdout;
  };
  const id = (await warren('create', '--idle', '600')).trim();
  assert.match(await warren('hibernate', id), new RegExp(`^${id} hibernated in \\d+ ms$`, 'm'));
  assert.match(await warren('info', id), /^state\s+hibernated$/m);
  assert.match(await warren('resume', id), new RegExp(`^${id} running`, 'm'));
  const kids = JSON.parse(await warren('fork', id, '--count', '2', '--json')) as Array<{ id: string; boot: string }>;
  assert.equal(kids.length, 2);
  const [kid] = kids;
  assert.ok(kid);
  assert.match(await warren('info', kid.id), new RegExp(`^boot\\s+forked from ${id}$`, 'm'));
  const snap = (await warren('snapshot', 'create', id)).trim();
  assert.match(await warren('snapshot', 'ls'), new RegExp(`^${snap}\\s+${id}\\s+base`, 'm'));
  await warren('snapshot', 'rm', snap);
  assert.doesNotMatch(await warren('snapshot', 'ls'), new RegExp(snap));
  await warren('rm', id, ...kids.map((k) => k.id));
});

test('kill -9 of the daemon during a hibernate and a fork leaves no sandbox half done', T, async () => {
  const a = await d!.create();
  const b = await d!.create();
  await a.exec('echo a > a.txt', { check: true });
  await b.exec('echo b > b.txt', { check: true });
  // Both in flight when the daemon dies: a mid-hibernate, b mid-fork.
  const from = d!.log().length;
  void a.hibernate().catch(() => undefined);
  void b.forkTree(2).catch(() => undefined);
  // Cut both once their checkpoints have begun (the driver makes each image directory just
  // before it runs runsc checkpoint). b's fork image goes when the fork is done: a fork that
  // is over already is cut later than wished, which is no failure.
  const images = path.join(d!.home, 'images');
  const forkImages = () => (existsSync(path.join(images, 'forks')) ? readdirSync(path.join(images, 'forks')) : []);
  await eventually(
    () =>
      existsSync(path.join(images, 'hibernated', a.id, 'image')) &&
      (forkImages().some((f) => existsSync(path.join(images, 'forks', f, 'image'))) || d!.log().slice(from).includes('"msg":"sandbox forked"')),
    30_000,
    'the hibernate and the fork to be under way',
    10,
  );
  await d!.crash();
  d = await startDaemon({ home: d!.home, env: { WARREN_MAX_FORK: String(MAX_FORK) } });
  const all = await Sandbox.list(d.conn);
  for (const s of all) assert.ok(['running', 'hibernated', 'dead'].includes(s.state), `${s.id} is ${s.state} after the restart`);
  for (const s of all.filter((x) => x.state === 'dead')) assert.ok(s.error, `${s.id} is dead without a reason`);
  for (const [sbx, file] of [
    [a, 'a.txt'],
    [b, 'b.txt'],
  ] as const) {
    const info = all.find((s) => s.id === sbx.id)!;
    if (info.state === 'dead') continue;
    const again = await Sandbox.connect(sbx.id, d.conn);
    assert.equal(await again.files.readText(file), `${file[0]}\n`, `${sbx.id} (${info.state}) lost its file`);
  }
  // Children of the cut fork are whole or absent.
  for (const s of all.filter((x) => x.boot === 'fork' && x.state === 'running')) {
    assert.equal(await (await Sandbox.connect(s.id, d.conn)).files.readText('b.txt'), 'b\n');
  }
});
