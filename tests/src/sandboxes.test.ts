/** Lifecycle through the API and SDK: create, get, list, kill, ttl, and bad input. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, NotFoundError, InvalidArgumentError, AuthenticationError, HttpClient } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, runscContainers, eventually, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
before(async () => {
  d = await startDaemon();
});
after(async () => {
  await stopAndCheckClean(d);
});

test('create returns a running sandbox that is ready for exec', async () => {
  const sbx = await d.create({ metadata: { task: 't1' }, env: { GREETING: 'hi' } });
  assert.equal(sbx.info.state, 'running');
  assert.match(sbx.id, /^sb-[a-z0-9]{12}$/);
  const r = await sbx.exec('echo $GREETING; hostname');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, `hi\n${sbx.id}\n`);
  assert.deepEqual(sbx.info.resources, { cpus: 2, memoryMB: 2048, pids: 1024, diskMB: 10240 });
  await sbx.kill();
});

test('get, list with metadata and state filters, pagination', async () => {
  const a = await d.create({ metadata: { group: 'g1', n: '1' } });
  const b = await d.create({ metadata: { group: 'g1', n: '2' } });
  const c = await d.create({ metadata: { group: 'g2' } });
  const g1 = await Sandbox.list({ ...d.conn, metadata: { group: 'g1' } });
  assert.deepEqual(g1.map((s) => s.id).sort(), [a.id, b.id].sort());
  const n2 = await Sandbox.list({ ...d.conn, metadata: { group: 'g1', n: '2' } });
  assert.deepEqual(
    n2.map((s) => s.id),
    [b.id],
  );
  const running = await Sandbox.list({ ...d.conn, state: 'running' });
  assert.ok(running.length >= 3);
  const page1 = await d.http.json<{ sandboxes: { id: string }[]; nextCursor?: string }>('GET', '/v1/sandboxes', { query: { limit: 2 } });
  assert.equal(page1.sandboxes.length, 2);
  assert.ok(page1.nextCursor);
  const page2 = await d.http.json<{ sandboxes: { id: string }[]; nextCursor?: string }>('GET', '/v1/sandboxes', {
    query: { limit: 2, cursor: page1.nextCursor },
  });
  assert.ok(page2.sandboxes.length >= 1);
  assert.equal(new Set([...page1.sandboxes, ...page2.sandboxes].map((s) => s.id)).size, page1.sandboxes.length + page2.sandboxes.length);
  const again = await Sandbox.connect(c.id, d.conn);
  assert.deepEqual(again.info.metadata, { group: 'g2' });
  await Promise.all([a.kill(), b.kill(), c.kill()]);
});

test('kill removes the sandbox; later calls get 404', async () => {
  const sbx = await d.create();
  await sbx.kill();
  assert.ok(!runscContainers(d.home).includes(sbx.id), 'runsc container should be gone');
  await assert.rejects(sbx.exec('true'), NotFoundError);
  await assert.rejects(sbx.files.read('/etc/hostname'), NotFoundError);
  await assert.rejects(Sandbox.connect(sbx.id, d.conn), NotFoundError);
  await assert.rejects(sbx.kill(), NotFoundError);
});

test('ttl: the reaper kills expired sandboxes with no client; setTtl extends from now', async () => {
  const short = await d.create({ ttlSeconds: 2 });
  const extended = await d.create({ ttlSeconds: 2 });
  const before = Date.parse(extended.info.expiresAt);
  const info = await extended.setTtl(60);
  assert.ok(Date.parse(info.expiresAt) >= before + 50_000, 'expiresAt moved forward');
  // The reaper destroys the sandbox first and forgets its record last (so a failed
  // teardown is never lost track of): wait for the record, then check the container.
  await eventually(
    () =>
      Sandbox.connect(short.id, d.conn).then(
        () => false,
        (e: Error) => e instanceof NotFoundError,
      ),
    15_000,
    'expired sandbox to be reaped',
  );
  assert.ok(!runscContainers(d.home).includes(short.id), 'runsc container of the reaped sandbox should be gone');
  const r = await extended.exec('echo alive');
  assert.equal(r.stdout, 'alive\n');
  await extended.kill();
});

test('unknown template: 404 listing the available ones', async () => {
  const err = await d.create({ template: 'nope' }).then(
    () => assert.fail('should fail'),
    (e: Error) => e,
  );
  assert.ok(err instanceof NotFoundError);
  assert.match(err.message, /unknown template 'nope'; available: .*base/);
});

test('invalid ttl and resources: 400 naming the field', async () => {
  await assert.rejects(d.create({ ttlSeconds: -5 }), (e: Error) => e instanceof InvalidArgumentError && /ttlSeconds/.test(e.message));
  await assert.rejects(d.create({ resources: { memoryMB: 1 } }), (e: Error) => e instanceof InvalidArgumentError && /resources\.memoryMB/.test(e.message));
  await assert.rejects(d.create({ resources: { cpus: 0 } }), (e: Error) => e instanceof InvalidArgumentError && /resources\.cpus/.test(e.message));
  await assert.rejects(d.create({ resources: { bogus: 1 } as never }), (e: Error) => e instanceof InvalidArgumentError && /resources/.test(e.message));
});

test('requests without a valid API key get 401', async () => {
  const res = await fetch(`${d.url}/v1/sandboxes`);
  assert.equal(res.status, 401);
  const body = (await res.json()) as { error: { code: string; message: string } };
  assert.equal(body.error.code, 'unauthenticated');
  const wrong = new HttpClient({ url: d.url, apiKey: 'wk_wrong' });
  await assert.rejects(wrong.json('GET', '/v1/health'), AuthenticationError);
});

test('oversized JSON body: 413', async () => {
  const res = await fetch(`${d.url}/v1/sandboxes`, {
    method: 'POST',
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ metadata: { big: 'x'.repeat(17 * 1024 * 1024) } }),
  });
  assert.equal(res.status, 413);
  assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'too_large');
});

test('a second daemon on the same home refuses to start', async () => {
  await assert.rejects(startDaemon({ home: d.home }), /another warren daemon .* is already running/);
});
