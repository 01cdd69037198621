import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HttpClient, ndjson, resolveApiKey } from './client.js';
import { InternalError, InvalidArgumentError, NetworkError, NotFoundError, TooLargeError, UnavailableError, WarrenError } from './errors.js';
import { FakeDaemon } from './testing.js';

let fake: FakeDaemon;
let client: HttpClient;

before(async () => {
  fake = await FakeDaemon.start();
  client = new HttpClient({ url: fake.url, apiKey: 'k-secret' });
});
after(() => fake.close());
beforeEach(() => fake.reset());

/** A URL nothing listens on: a port that was free a moment ago. */
async function deadUrl(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

test('requests carry the Bearer key, the query without undefined values, and JSON bodies as JSON', async () => {
  fake.on('POST', '/v1/things', { status: 201, json: { ok: true } });
  const out = await client.json<{ ok: boolean }>('POST', '/v1/things', { json: { a: 1, b: 'x' }, query: { n: 3, s: 'a b&c', skip: undefined } });
  assert.deepEqual(out, { ok: true });
  const [req] = fake.requests;
  assert.equal(req?.method, 'POST');
  assert.equal(req?.path, '/v1/things');
  assert.deepEqual(req?.query, { n: '3', s: 'a b&c' });
  assert.equal(req?.headers.authorization, 'Bearer k-secret');
  assert.equal(req?.headers['content-type'], 'application/json');
  assert.deepEqual(req?.json, { a: 1, b: 'x' });
});

test('the URL loses trailing slashes and may carry a path prefix; 204 gives undefined', async () => {
  fake.on('DELETE', '/prefix/v1/x');
  const c = new HttpClient({ url: `${fake.url}/prefix//`, apiKey: 'k' });
  assert.equal(c.url, `${fake.url}/prefix`);
  assert.equal(await c.json('DELETE', '/v1/x'), undefined);
  assert.equal(fake.requests[0]?.path, '/prefix/v1/x');
});

test('the API key comes from the option, else $WARREN_API_KEY, else $WARREN_HOME/admin.key; none sends no header', async () => {
  const saved = { key: process.env.WARREN_API_KEY, home: process.env.WARREN_HOME, url: process.env.WARREN_URL };
  const home = mkdtempSync(path.join(tmpdir(), 'warren-sdk-key-'));
  try {
    process.env.WARREN_HOME = home;
    delete process.env.WARREN_API_KEY;
    assert.equal(resolveApiKey(), undefined);
    writeFileSync(path.join(home, 'admin.key'), 'from-file\n');
    assert.equal(resolveApiKey(), 'from-file');
    process.env.WARREN_API_KEY = 'from-env';
    assert.equal(resolveApiKey(), 'from-env');
    assert.equal(resolveApiKey('explicit'), 'explicit');
    // $WARREN_URL is the default URL.
    process.env.WARREN_URL = `${fake.url}/`;
    fake.on('GET', '/v1/health', { json: {} });
    await new HttpClient().json('GET', '/v1/health');
    assert.equal(fake.requests[0]?.headers.authorization, 'Bearer from-env');
    delete process.env.WARREN_API_KEY;
    rmSync(path.join(home, 'admin.key'));
    await new HttpClient().json('GET', '/v1/health');
    assert.equal(fake.requests[1]?.headers.authorization, undefined);
  } finally {
    for (const [name, value] of [
      ['WARREN_API_KEY', saved.key],
      ['WARREN_HOME', saved.home],
      ['WARREN_URL', saved.url],
    ] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    rmSync(home, { recursive: true, force: true });
  }
});

test('error answers become their class with status, requestId and the request named in the message', async () => {
  fake.on('GET', '/v1/sandboxes/sb-x', { status: 404, json: { error: { code: 'not_found', message: 'no sandbox sb-x' } } });
  fake.on('POST', '/v1/sandboxes', { status: 500, json: { error: { code: 'internal', message: 'runsc could not start sandbox sb-y', requestId: 'abc-123' } } });
  await assert.rejects(client.request('GET', '/v1/sandboxes/sb-x'), (e: Error) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.status, 404);
    assert.equal(e.message, 'no sandbox sb-x');
    return true;
  });
  await assert.rejects(client.json('POST', '/v1/sandboxes', { json: {} }), (e: Error) => {
    assert.ok(e instanceof InternalError);
    assert.equal(e.status, 500);
    assert.equal(e.requestId, 'abc-123');
    assert.equal(e.message, 'runsc could not start sandbox sb-y (request abc-123; details in the daemon log)');
    return true;
  });
});

test('non-JSON error bodies: the text is the message, the status picks the class', async () => {
  fake.on('PUT', '/v1/big', { status: 413, text: 'Payload Too Large' });
  fake.on('GET', '/v1/proxy', { status: 502, text: '<html>bad gateway</html>' });
  fake.on('GET', '/v1/empty', { status: 503, text: '' });
  await assert.rejects(
    client.request('PUT', '/v1/big', { body: 'x' }),
    (e: Error) => e instanceof TooLargeError && e.status === 413 && e.message === 'Payload Too Large',
  );
  await assert.rejects(
    client.request('GET', '/v1/proxy'),
    (e: Error) => e instanceof InternalError && e.status === 502 && e.message === '<html>bad gateway</html>',
  );
  await assert.rejects(client.request('GET', '/v1/empty'), (e: Error) => e instanceof UnavailableError && e.message === 'HTTP 503');
});

test('an unreachable daemon is a NetworkError naming the URL, with the connection error as cause', async () => {
  const url = await deadUrl();
  const c = new HttpClient({ url, apiKey: 'k' });
  for (const call of [() => c.request('GET', '/v1/health'), () => c.request('POST', '/v1/sandboxes', { json: {} }), () => c.download('/v1/files')]) {
    await assert.rejects(call(), (e: Error) => {
      assert.ok(e instanceof NetworkError, String(e));
      assert.ok(e instanceof WarrenError);
      assert.equal(e.code, 'network');
      assert.equal(e.status, undefined);
      assert.ok(e.message.startsWith(`cannot reach warren daemon at ${url}: `), e.message);
      assert.match(e.message, /ECONNREFUSED/);
      assert.ok(e.cause instanceof Error);
      return true;
    });
  }
});

test('a stale keep-alive connection: reads, deletes and whole-body PUTs are sent once more, other writes are not', async () => {
  fake.on('GET', '/v1/r', 'drop', { json: { n: 1 } });
  assert.deepEqual(await client.json('GET', '/v1/r'), { n: 1 });
  assert.equal(fake.sent('GET', '/v1/r').length, 2);

  fake.on('PUT', '/v1/w', 'drop', { json: { size: 5 } });
  assert.deepEqual(await client.json('PUT', '/v1/w', { body: 'hello' }), { size: 5 });
  assert.deepEqual(
    fake.sent('PUT', '/v1/w').map((r) => r.body.toString()),
    ['hello', 'hello'],
  );

  // A body factory makes a fresh stream for the second attempt.
  fake.on('PUT', '/v1/f', 'drop', { json: { size: 3 } });
  const factory = () => new Blob(['abc']).stream();
  assert.deepEqual(await client.json('PUT', '/v1/f', { body: factory }), { size: 3 });
  assert.deepEqual(
    fake.sent('PUT', '/v1/f').map((r) => r.body.toString()),
    ['abc', 'abc'],
  );

  fake.on('DELETE', '/v1/d', 'drop', { status: 204 });
  assert.equal(await client.json('DELETE', '/v1/d'), undefined);
  assert.equal(fake.sent('DELETE', '/v1/d').length, 2);

  // Not replayable: a POST (it could apply twice) and a stream handed in (it cannot be re-read).
  fake.on('POST', '/v1/p', 'drop', { json: {} });
  await assert.rejects(client.json('POST', '/v1/p', { json: {} }), NetworkError);
  assert.equal(fake.sent('POST', '/v1/p').length, 1);
  fake.on('PUT', '/v1/s', 'drop', { json: {} });
  await assert.rejects(client.json('PUT', '/v1/s', { body: new Blob(['abc']).stream() }), NetworkError);
  assert.equal(fake.sent('PUT', '/v1/s').length, 1);

  // Dropped twice: the retry fails too, and that is the error.
  fake.on('GET', '/v1/gone', 'drop');
  await assert.rejects(client.json('GET', '/v1/gone'), NetworkError);
  assert.equal(fake.sent('GET', '/v1/gone').length, 2);
});

test('download: a Node stream of the body with the key and query; errors mapped; a stale connection retried', async () => {
  fake.on('GET', '/v1/dl', 'drop', { text: 'file bytes' });
  const res = await client.download('/v1/dl', { path: '/w/a b', user: undefined });
  let text = '';
  for await (const c of res) text += (c as Buffer).toString();
  assert.equal(text, 'file bytes');
  const sent = fake.sent('GET', '/v1/dl');
  assert.equal(sent.length, 2);
  assert.deepEqual(sent[1]?.query, { path: '/w/a b' });
  assert.equal(sent[1]?.headers.authorization, 'Bearer k-secret');

  fake.on('GET', '/v1/dl-missing', { status: 404, json: { error: { code: 'not_found', message: 'no such file' } } });
  await assert.rejects(client.download('/v1/dl-missing'), (e: Error) => e instanceof NotFoundError && e.message === 'no such file');
  fake.on('GET', '/v1/dl-text', { status: 400, text: 'bad path' });
  await assert.rejects(client.download('/v1/dl-text'), (e: Error) => e instanceof InvalidArgumentError && e.message === 'bad path');
});

test('ndjson parses lines split across chunks, skips blank lines and takes a last line without newline', async () => {
  fake.on('GET', '/v1/stream', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    // The second chunk ends inside the two bytes of ü.
    const rest = Buffer.from(':"ü日"}\n\n{"c":3}');
    res.write('{"a":1}\n{"b"');
    setTimeout(() => {
      res.write(rest.subarray(0, 3));
      setTimeout(() => res.end(rest.subarray(3)), 5);
    }, 5);
  });
  const events: unknown[] = [];
  for await (const e of ndjson(await client.request('GET', '/v1/stream'))) events.push(e);
  assert.deepEqual(events, [{ a: 1 }, { b: 'ü日' }, { c: 3 }]);
});
