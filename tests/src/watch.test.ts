/**
 * File watches against real sandboxes (GET /files/watch through the SDK): create, write,
 * remove and rename seen from inside; a recursive watch picks up a new directory and the
 * files made in it; events stop after close; a missing path is a 404; a watch as a user
 * cannot see what the user cannot list; the cap on open watches; and the watch ends when
 * the sandbox is killed.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { MAX_WATCHES } from '@warren/protocol';
import {
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  UnavailableError,
  type WarrenError,
  type FileWatch,
  type FileWatchEvent,
  type Sandbox,
  type WatchChange,
} from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
let sbx: Sandbox;

before(async () => {
  d = await startDaemon();
  sbx = await d.create({ ttlSeconds: 1800 });
});
after(async () => {
  await stopAndCheckClean(d);
});

async function sh(cmd: string, user?: string): Promise<void> {
  const r = await sbx.exec(cmd, { user, timeoutSeconds: 60 });
  assert.equal(r.exitCode, 0, `${cmd} failed: ${r.stderr}`);
}

/** A watch whose events are kept, and a way to wait for one. */
async function watching(
  path: string,
  recursive = false,
  user?: string,
): Promise<{ w: FileWatch; events: FileWatchEvent[]; seen: (match: (e: WatchChange) => boolean, what: string) => Promise<WatchChange> }> {
  const events: FileWatchEvent[] = [];
  const w = await sbx.files.watch(path, { recursive, user }, (e) => events.push(e));
  const seen = (match: (e: WatchChange) => boolean, what: string) =>
    eventually(() => events.find((e): e is WatchChange => e.type !== 'overflow' && match(e)), 15_000, `${what} (got ${JSON.stringify(events)})`, 50);
  return { w, events, seen };
}

test('create, write, remove and rename in a watched directory', async () => {
  await sh('mkdir -p /work/w1');
  const { w, seen } = await watching('/work/w1');
  assert.equal(w.path, '/work/w1');
  assert.equal(w.isDir, true);
  await sh('echo one > /work/w1/a.txt');
  await seen((e) => e.type === 'create' && e.path === '/work/w1/a.txt' && e.isDir === false, 'create a.txt');
  await sh('echo two >> /work/w1/a.txt');
  await seen((e) => e.type === 'write' && e.path === '/work/w1/a.txt', 'write a.txt');
  await sh('mv /work/w1/a.txt /work/w1/b.txt');
  const moved = await seen((e) => (e.type === 'rename' || e.type === 'create') && e.path === '/work/w1/b.txt', 'rename to b.txt');
  if (moved.type === 'rename') assert.equal(moved.oldPath, '/work/w1/a.txt');
  await sh('rm /work/w1/b.txt');
  await seen((e) => e.type === 'remove' && e.path === '/work/w1/b.txt', 'remove b.txt');
  await sh('mkdir /work/w1/sub');
  await seen((e) => e.type === 'create' && e.path === '/work/w1/sub' && e.isDir === true, 'create sub/');
  w.close();
  assert.equal(await w.done, undefined);
});

test('a rename inside the tree is reported with its old path', async () => {
  await sh('mkdir -p /work/w2 && echo x > /work/w2/old');
  const { w, seen } = await watching('/work/w2');
  await sh('mv /work/w2/old /work/w2/new');
  const e = await seen((e) => e.path === '/work/w2/new', 'the new name');
  assert.deepEqual(e, { type: 'rename', path: '/work/w2/new', oldPath: '/work/w2/old', isDir: false });
  w.close();
});

test('recursive: a new subdirectory and a file in it, and a deeper existing tree', async () => {
  await sh('mkdir -p /work/w3/deep/er');
  const { w, seen } = await watching('/work/w3', true);
  await sh('echo hi > /work/w3/deep/er/f');
  await seen((e) => e.type === 'create' && e.path === '/work/w3/deep/er/f', 'create in an existing subtree');
  await sh('mkdir -p /work/w3/new/inner && echo x > /work/w3/new/inner/file');
  await seen((e) => e.type === 'create' && e.path === '/work/w3/new' && e.isDir === true, 'create new/');
  await seen((e) => e.path === '/work/w3/new/inner/file', 'the file in the new subdirectory');
  // Made after the new directory's watch is surely in place.
  await sleep(200);
  await sh('echo y > /work/w3/new/inner/later');
  await seen((e) => e.type === 'create' && e.path === '/work/w3/new/inner/later', 'create later in the new subdirectory');
  w.close();
});

test('a non-recursive watch does not report changes in subdirectories', async () => {
  await sh('mkdir -p /work/w4/sub');
  const { w, events, seen } = await watching('/work/w4');
  await sh('echo x > /work/w4/sub/hidden && echo y > /work/w4/top');
  await seen((e) => e.path === '/work/w4/top', 'create top');
  assert.equal(
    events.find((e) => 'path' in e && e.path.startsWith('/work/w4/sub/')),
    undefined,
  );
  w.close();
});

test('watching a file sees it replaced by rename (as editors save) and removed', async () => {
  await sh('echo a > /work/one.txt');
  const { w, events, seen } = await watching('/work/one.txt');
  assert.equal(w.isDir, false);
  await sh('echo b > /work/other.txt && echo c > /work/.one.tmp && mv /work/.one.tmp /work/one.txt');
  await seen((e) => e.path === '/work/one.txt' && (e.type === 'create' || e.type === 'rename'), 'the replaced file');
  await sh('echo d >> /work/one.txt');
  await seen((e) => e.type === 'write' && e.path === '/work/one.txt', 'a write after the replace');
  await sh('rm /work/one.txt');
  await seen((e) => e.type === 'remove' && e.path === '/work/one.txt', 'remove');
  assert.equal(
    events.find((e) => 'path' in e && e.path === '/work/other.txt'),
    undefined,
    'a file watch reports its own name only',
  );
  w.close();
});

test('a symlink to a directory is watched as the directory, under the link', async () => {
  await sh('mkdir -p /work/real && ln -sfn /work/real /work/link');
  const { w, seen } = await watching('/work/link');
  assert.equal(w.isDir, true);
  await sh('touch /work/real/via-link');
  await seen((e) => e.type === 'create' && e.path === '/work/link/via-link', 'create under the link path');
  w.close();
});

test('no events after close; the iterator ends', async () => {
  await sh('mkdir -p /work/w5');
  const events: FileWatchEvent[] = [];
  const w = await sbx.files.watch('/work/w5', {}, (e) => events.push(e));
  await sh('touch /work/w5/a');
  await eventually(() => events.length > 0, 15_000, 'a first event', 50);
  w.close();
  const count = events.length;
  await sh('touch /work/w5/b /work/w5/c');
  await sleep(500);
  assert.equal(events.length, count);
  // Iterating a closed watch ends at once.
  const iterated: FileWatchEvent[] = [];
  for await (const e of w) iterated.push(e);
  assert.deepEqual(iterated, []);
});

test('iterating a watch with for await', async () => {
  await sh('mkdir -p /work/w6');
  const w = await sbx.files.watch('/work/w6');
  await sh('echo x > /work/w6/it');
  for await (const e of w) {
    if (e.type === 'create' && e.path === '/work/w6/it') break;
  }
  w.close();
});

test('the watched directory removed ends the watch with not_found', async () => {
  await sh('mkdir -p /work/w7');
  const { w, seen } = await watching('/work/w7');
  await sh('rm -rf /work/w7');
  await seen((e) => e.type === 'remove' && e.path === '/work/w7', 'remove of the root');
  const err = await w.done;
  assert.ok(err instanceof NotFoundError, `expected NotFoundError, got ${String(err)}`);
});

test('watching a missing path is a 404 with a message; bad input is a 400', async () => {
  const err = await sbx.files.watch('/work/no/such/dir').then(
    () => assert.fail('expected a failure'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof NotFoundError, String(err));
  assert.match(err.message, /no such file or directory/);
  const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files/watch?path=/work&recursive=maybe`, { headers: { authorization: `Bearer ${d.apiKey}` } });
  assert.equal(res.status, 400);
  const noPath = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files/watch`, { headers: { authorization: `Bearer ${d.apiKey}` } });
  assert.equal(noPath.status, 400);
  const noKey = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/files/watch?path=/work`);
  assert.equal(noKey.status, 401);
  await noKey.body?.cancel();
});

test('a watch runs as its user: an unreadable directory is refused, unreadable subtrees are left out', async () => {
  await sh('mkdir -p /work/w8/open /work/w8/closed && chmod 700 /work/w8/closed', 'root');
  const err = await sbx.files.watch('/root').then(
    () => assert.fail('expected a failure'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof PermissionDeniedError, String(err));
  const { w, events, seen } = await watching('/work/w8', true);
  try {
    await sh('echo secret > /work/w8/closed/s && echo x > /work/w8/open/o', 'root');
    await seen((e) => e.path === '/work/w8/open/o', 'create in the readable subtree');
    assert.equal(
      events.find((e) => 'path' in e && e.path.startsWith('/work/w8/closed/')),
      undefined,
    );
  } finally {
    w.close();
  }
  // Root sees it.
  const rootWatch = await watching('/work/w8', true, 'root');
  try {
    await sh('echo more > /work/w8/closed/t', 'root');
    await rootWatch.seen((e) => e.path === '/work/w8/closed/t', 'root sees the closed subtree');
  } finally {
    rootWatch.w.close();
  }
});

test(`at most ${MAX_WATCHES} open watches per sandbox`, async () => {
  const open: FileWatch[] = [];
  try {
    for (let i = 0; i < MAX_WATCHES; i++) open.push(await sbx.files.watch('/work'));
    const err = await sbx.files.watch('/work').then(
      () => assert.fail('expected a failure'),
      (e: unknown) => e as WarrenError,
    );
    assert.ok(err instanceof ResourceExhaustedError, String(err));
    assert.match(err.message, /open watches/);
  } finally {
    for (const w of open) w.close();
  }
  // Closed watches free their places (the agent hears the cancel a moment later).
  const again = await eventually(() => sbx.files.watch('/work'), 15_000, 'a watch after closing the others');
  again.close();
});

test('a burst of writes to one file arrives coalesced, ending with the last change', async () => {
  await sh('mkdir -p /work/w9');
  const { w, events, seen } = await watching('/work/w9');
  await sh('for i in $(seq 200); do echo $i >> /work/w9/log; done; rm /work/w9/log');
  await seen((e) => e.type === 'remove' && e.path === '/work/w9/log', 'the last change');
  const forLog = events.filter((e) => 'path' in e && e.path === '/work/w9/log');
  assert.ok(forLog.length < 100, `expected coalescing, got ${forLog.length} events`);
  assert.equal(forLog.at(-1)?.type, 'remove');
  w.close();
});

test('killing the sandbox ends its watches', async () => {
  const other = await d.create({ ttlSeconds: 600 });
  const w = await other.files.watch('/home/user', { recursive: true });
  await other.kill();
  const err = await w.done;
  assert.ok(err instanceof UnavailableError || err instanceof NotFoundError, `expected the watch to end with an error, got ${String(err)}`);
});

test('an open watch keeps an idle sandbox awake and refuses an explicit hibernate; closed, it lets it hibernate', async () => {
  const watched = await d.create({ idleSeconds: 2, ttlSeconds: 600 });
  try {
    const w = await watched.files.watch('/home/user');
    await assert.rejects(watched.hibernate(), (e: WarrenError) => e.status === 409 && /in progress/.test(e.message));
    // Well past idleSeconds and two heartbeats.
    await sleep(12_000);
    assert.equal((await watched.refresh()).state, 'running', 'a watched sandbox must not hibernate');
    w.close();
    await eventually(async () => (await watched.refresh()).state === 'hibernated', 30_000, 'hibernated once the watch was closed');
  } finally {
    await watched.kill();
  }
});

test('a recursive watch of / leaves out /proc, /sys and /dev and still reports changes', async () => {
  const { w, events, seen } = await watching('/', true, 'root');
  try {
    await sh('mkdir -p /work/from-root && echo x > /work/from-root/f');
    await seen((e) => e.path === '/work/from-root/f', 'a change deep under /');
    assert.equal(
      events.find((e) => e.type === 'overflow'),
      undefined,
      'the directory cap was not reached',
    );
  } finally {
    w.close();
  }
});
