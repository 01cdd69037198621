/**
 * Security battery, saved machines and the API key (docs/security.md): a snapshot is a
 * frozen instant that later writes of its source never reach; a sandbox restored from it
 * gets no egress rules or credentials unless the create gives them; and the API key header
 * forms the daemon accepts.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;
let server: http.Server;
let port = 0;
const seenAuth: string[] = [];

before(async () => {
  d = await startDaemon();
  server = http.createServer((req, res) => {
    seenAuth.push(req.headers.authorization ?? '');
    res.end('upstream says hi\n');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});

after(async () => {
  server?.close();
  await stopAndCheckClean(d);
});

test('snapshots: writes the source makes after a snapshot never reach sandboxes restored from it, nor theirs each other', T, async () => {
  const src = await d!.create();
  const restored: Sandbox[] = [];
  try {
    await src.files.write('kept.txt', 'before\n');
    const snap = await src.snapshot();
    await src.files.write('kept.txt', 'after\n');
    await src.files.write('later.txt', 'only in the source\n');
    await src.exec('rm -f /home/user/.bashrc', { check: true });
    for (let i = 0; i < 2; i++) restored.push(await d!.create({ snapshot: snap.id }));
    const [a, b] = restored as [Sandbox, Sandbox];
    for (const r of [a, b]) {
      assert.equal(await r.files.readText('kept.txt'), 'before\n');
      assert.equal((await r.exec('test -e later.txt && echo yes || echo no')).stdout, 'no\n');
      assert.equal((await r.exec('test -e .bashrc && echo yes || echo no')).stdout, 'yes\n');
    }
    await a.files.write('kept.txt', 'written in a\n');
    assert.equal(await b.files.readText('kept.txt'), 'before\n');
    assert.equal(await src.files.readText('kept.txt'), 'after\n');
    // And a third restore, after all that, still starts from the snapshot's instant.
    const c = await d!.create({ snapshot: snap.id });
    restored.push(c);
    assert.equal(await c.files.readText('kept.txt'), 'before\n');
  } finally {
    await Promise.all([src, ...restored].map((s) => s.kill()));
  }
});

test('snapshots: a sandbox restored from a snapshot has no egress rules or credentials unless the create gives them', T, async () => {
  const target = `127.0.0.1:${port}`;
  const src = await d!.create({ network: { allow: [target], credentials: [{ host: target, headers: { Authorization: 'Bearer from-the-source' } }] } });
  const restored: Sandbox[] = [];
  try {
    const curl = (s: Sandbox) => s.exec(['curl', '-sS', '--noproxy', '', '--max-time', '20', '-o', '/dev/null', '-w', '%{http_code}', `http://${target}/`]);
    assert.equal((await curl(src)).stdout, '200');
    assert.equal(seenAuth.at(-1), 'Bearer from-the-source');
    const snap = await src.snapshot();

    const bare = await d!.create({ snapshot: snap.id });
    restored.push(bare);
    assert.deepEqual(await bare.getNetwork(), { allow: [] });
    const before = seenAuth.length;
    assert.equal((await curl(bare)).stdout, '403');
    assert.equal(seenAuth.length, before, 'the refused request reached the server');
    const log = await bare.egressLog();
    assert.ok(
      log.some((e) => e.host === '127.0.0.1' && e.port === port && e.decision === 'denied'),
      JSON.stringify(log),
    );

    const given = await d!.create({ snapshot: snap.id, network: { allow: [target] } });
    restored.push(given);
    assert.deepEqual(await given.getNetwork(), { allow: [target] });
    assert.equal((await curl(given)).stdout, '200');
    assert.equal(seenAuth.at(-1), '', 'credentials reached the server from a sandbox that was not given any');
  } finally {
    await Promise.all([src, ...restored].map((s) => s.kill()));
  }
});

test('api: the key is accepted as Authorization: Bearer or X-Api-Key (E2B clients send the latter); anything else is 401', T, async () => {
  const get = (headers: Record<string, string>) => fetch(`${d!.url}/v1/sandboxes`, { headers });
  assert.equal((await get({ authorization: `Bearer ${d!.apiKey}` })).status, 200);
  assert.equal((await get({ 'x-api-key': d!.apiKey })).status, 200);
  const refused: Array<Record<string, string>> = [
    {},
    { 'x-api-key': 'wk_wrong' },
    { authorization: 'Bearer wk_wrong' },
    { authorization: d!.apiKey },
    { authorization: `Bearer wk_wrong`, 'x-api-key': d!.apiKey },
  ];
  for (const headers of refused) {
    const res = await get(headers);
    assert.equal(res.status, 401, JSON.stringify(headers));
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'unauthenticated');
  }
});
