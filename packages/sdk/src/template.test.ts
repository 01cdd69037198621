/**
 * Template recipes and builds, warm pools and bakes, and usage: what they send and how they
 * read the answers, against a fake daemon on 127.0.0.1.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import type { TemplateBuildEvent } from '@warren/protocol';
import { ConflictError, NetworkError, UnavailableError } from './errors.js';
import { Template, TemplateBuildError } from './template.js';
import { FakeDaemon } from './testing.js';
import { getUsage } from './usage.js';
import { bake, getBake, getPool, setPoolSize } from './warm.js';

let fake: FakeDaemon;
let conn: { url: string; apiKey: string };

before(async () => {
  fake = await FakeDaemon.start();
  conn = { url: fake.url, apiKey: 'k-test' };
});
after(() => fake.close());
beforeEach(() => fake.reset());

const TEMPLATE_INFO = { name: 'my-app', version: 'v2', from: 'base', builtAt: '2024-05-01T12:00:00.000Z' };

test('a recipe chain: each call returns a new Template, so chains branch without sharing steps', () => {
  const base = Template.from('debian:bookworm', { include: ['ca-certificates'] }).aptInstall(['jq']);
  const app = base
    .run('make', { user: 'user', cwd: '/src' })
    .copy('server.js', '/app/server.js', { owner: 'user' })
    .env({ PORT: '3000' })
    .workdir('/app')
    .user('user')
    .start('node server.js')
    .readyPort(3000, { timeoutSeconds: 30 });
  const other = base.run('true').readyCommand('test -f /ok');
  assert.deepEqual(app.toRecipe('my-app'), {
    name: 'my-app',
    from: 'debian:bookworm',
    include: ['ca-certificates'],
    steps: [
      { type: 'apt', packages: ['jq'] },
      { type: 'run', cmd: 'make', user: 'user', cwd: '/src' },
      { type: 'copy', src: 'server.js', dest: '/app/server.js', owner: 'user' },
      { type: 'env', env: { PORT: '3000' } },
      { type: 'workdir', path: '/app' },
      { type: 'user', user: 'user' },
    ],
    start: { cmd: 'node server.js' },
    ready: { port: 3000, timeoutSeconds: 30 },
  });
  assert.deepEqual(other.toRecipe('o'), {
    name: 'o',
    from: 'debian:bookworm',
    include: ['ca-certificates'],
    steps: [
      { type: 'apt', packages: ['jq'] },
      { type: 'run', cmd: 'true' },
    ],
    ready: { cmd: 'test -f /ok' },
  });
  assert.deepEqual(base.toRecipe('b').steps, [{ type: 'apt', packages: ['jq'] }]);
  assert.deepEqual(Template.from('base').toRecipe('t'), { name: 't', from: 'base', steps: [] });
});

test('build posts the recipe with an absolute context directory, passes every event on and resolves with the template', async () => {
  const events: TemplateBuildEvent[] = [
    { type: 'step', step: 1, total: 2, kind: 'from', description: 'from base', cached: true },
    { type: 'log', step: 2, stream: 'stdout', line: 'building' },
    { type: 'keepalive' },
    { type: 'step_done', step: 2, total: 2, cached: false, elapsedMs: 5 },
    { type: 'done', template: TEMPLATE_INFO as never, elapsedMs: 9 },
  ];
  fake.on('POST', '/v1/templates/build', { ndjson: events });
  const seen: TemplateBuildEvent[] = [];
  const info = await Template.from('base')
    .run('make')
    .build({ ...conn, name: 'my-app', contextDir: 'ctx/dir', onEvent: (e) => seen.push(e) });
  assert.deepEqual(info, TEMPLATE_INFO);
  assert.deepEqual(seen, events);
  const [req] = fake.sent('POST', '/v1/templates/build');
  assert.equal(req?.headers.authorization, 'Bearer k-test');
  assert.deepEqual(req?.json, { name: 'my-app', from: 'base', steps: [{ type: 'run', cmd: 'make' }], contextDir: path.resolve('ctx/dir') });
  fake.reset();
  fake.on('POST', '/v1/templates/build', { ndjson: events });
  await Template.buildRecipe({ name: 'r', from: 'base' }, conn);
  assert.deepEqual(fake.requests[0]?.json, { name: 'r', from: 'base', contextDir: process.cwd() });
});

test('a failed build is a TemplateBuildError with the step, exit code and output; a cut stream is UnavailableError', async () => {
  fake.on(
    'POST',
    '/v1/templates/build',
    {
      ndjson: [
        { type: 'step', step: 2, total: 2, kind: 'run', description: 'run ls /nope', cached: false },
        { type: 'error', code: 'failed_precondition', message: 'step 2/2 (run ls /nope) failed with exit code 2', step: 2, exitCode: 2, output: 'ls: /nope' },
      ],
    },
    { ndjson: [{ type: 'step', step: 1, total: 1, kind: 'from', description: 'from base', cached: true }] },
  );
  await assert.rejects(Template.buildRecipe({ name: 'x', from: 'base' }, conn), (e: Error) => {
    assert.ok(e instanceof TemplateBuildError);
    assert.equal(e.code, 'failed_precondition');
    assert.equal(e.status, 409);
    assert.equal(e.step, 2);
    assert.equal(e.exitCode, 2);
    assert.equal(e.output, 'ls: /nope');
    assert.match(e.message, /failed with exit code 2/);
    return true;
  });
  await assert.rejects(Template.buildRecipe({ name: 'x', from: 'base' }, conn), UnavailableError);
});

test('a build is sent once more after a stale connection (a duplicate finds the cached work), but not a third time', async () => {
  fake.on('POST', '/v1/templates/build', 'drop', { ndjson: [{ type: 'done', template: TEMPLATE_INFO, elapsedMs: 1 }] });
  assert.deepEqual(await Template.buildRecipe({ name: 'x', from: 'base' }, conn), TEMPLATE_INFO);
  assert.equal(fake.requests.length, 2);
  fake.reset();
  fake.on('POST', '/v1/templates/build', 'drop');
  await assert.rejects(Template.buildRecipe({ name: 'x', from: 'base' }, conn), NetworkError);
  assert.equal(fake.requests.length, 2);
});

test('templates: list, get, delete (names escaped) and prune', async () => {
  fake.on('GET', '/v1/templates', { json: { templates: [TEMPLATE_INFO] } });
  fake.on('GET', '/v1/templates/my%20app', { json: TEMPLATE_INFO });
  fake.on('DELETE', '/v1/templates/base', { status: 409, json: { error: { code: 'conflict', message: "template 'base' is in use by sb-1" } } });
  fake.on('POST', '/v1/templates/prune', { json: { removed: 2, freedBytes: 10, kept: 1 } });
  assert.deepEqual(await Template.list(conn), [TEMPLATE_INFO]);
  assert.deepEqual(await Template.get('my app', conn), TEMPLATE_INFO);
  await assert.rejects(Template.delete('base', conn), (e: Error) => e instanceof ConflictError && e.status === 409);
  assert.deepEqual(await Template.pruneLayers({ all: true }, conn), { removed: 2, freedBytes: 10, kept: 1 });
  assert.deepEqual(fake.sent('POST', '/v1/templates/prune')[0]?.json, { all: true });
  await Template.pruneLayers({}, conn);
  assert.deepEqual(fake.sent('POST', '/v1/templates/prune')[1]?.json, {});
});

test('pool and bake: get and set the pool size, get and run a bake, template names escaped', async () => {
  const pool = { template: 'node dev', size: 2, ready: 1, booting: 1, hits: 0, misses: 0, reclaimed: 0, bootFailures: 0, claimMs: null };
  fake.on('GET', '/v1/templates/node%20dev/pool', { json: pool });
  fake.on('PUT', '/v1/templates/node%20dev/pool', { json: { ...pool, size: 0 } });
  fake.on('GET', '/v1/templates/node%20dev/bake', { json: { state: 'none', reason: 'never baked' } });
  fake.on('POST', '/v1/templates/node%20dev/bake', { json: { state: 'ready', ms: 900 } });
  assert.deepEqual(await getPool('node dev', conn), pool);
  assert.equal((await setPoolSize('node dev', 0, conn)).size, 0);
  assert.deepEqual(fake.sent('PUT', '/v1/templates/node%20dev/pool')[0]?.json, { size: 0 });
  assert.equal((await getBake('node dev', conn)).state, 'none');
  assert.equal((await bake('node dev', conn)).state, 'ready');
  assert.equal(fake.requests.length, 4);
});

test('usage: the window as ISO instants (Dates converted) and the API key filter in the query', async () => {
  fake.on('GET', '/v1/usage', { json: { sandboxes: [] } });
  await getUsage({ since: new Date('2024-05-01T00:00:00Z'), until: '2024-05-02', apiKey: 'key-1' }, conn);
  await getUsage({}, conn);
  assert.deepEqual(
    fake.sent('GET', '/v1/usage').map((r) => r.query),
    [{ since: '2024-05-01T00:00:00.000Z', until: '2024-05-02', apiKey: 'key-1' }, {}],
  );
  assert.equal(fake.requests[0]?.headers.authorization, 'Bearer k-test');
});
