/**
 * The error contract (docs/api.md, "Errors"): a server-side failure answers with a code, a
 * message in the caller's terms and a request id, never runsc's output or a host path; the
 * daemon's log has the details under the same request id. Provoked for real: a runsc
 * restore of a damaged image, and a template build step that fails.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { truncateSync } from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { Snapshots, Template, TemplateBuildError, getDaemonLogs } from '@warren/sdk';
import { REPO, TEMPLATES, eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon({ env: { WARREN_BAKE: '0' } });
});

after(async () => {
  await stopAndCheckClean(d);
});

/** Host paths a body must never show: the daemon's home and the templates directory. */
function assertNoHostPath(text: string): void {
  for (const p of [d!.home, TEMPLATES, '/var/lib/', '/proc/']) assert.ok(!text.includes(p), `the body shows the host path ${p}: ${text}`);
}

test('errors: a runsc failure answers 500 with a request id and no runsc output or host path; the log has the details under that id', T, async () => {
  const sbx = await d!.create();
  try {
    const snap = await sbx.snapshot();
    truncateSync(path.join(d!.home, 'images', 'snapshots', snap.id, 'image', 'checkpoint.img'), 100);
    const res = await fetch(`${d!.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d!.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ snapshot: snap.id }),
    });
    const text = await res.text();
    assert.equal(res.status, 500, text);
    const body = JSON.parse(text) as { error: { code: string; message: string; requestId?: string; details?: unknown } };
    assert.equal(body.error.code, 'internal');
    assert.match(body.error.message, /^runsc could not start sandbox sb-[a-z0-9]+$/);
    assert.equal(body.error.details, undefined);
    assertNoHostPath(text);
    const id = body.error.requestId;
    assert.ok(id && res.headers.get('x-request-id') === id, `request id in body ${id} and header ${res.headers.get('x-request-id')}`);
    // The operator's side: one structured log line under that id, with what runsc said.
    const line = await eventually(
      () =>
        d!
          .log()
          .split('\n')
          .find((l) => l.includes(`"requestId":"${id}"`)),
      5_000,
      'the log line of the failed request',
    );
    const logged = JSON.parse(line) as { msg: string; err: string; code: string; path: string };
    assert.equal(logged.msg, 'request failed');
    assert.equal(logged.code, 'internal');
    assert.equal(logged.path, '/v1/sandboxes');
    assert.match(logged.err, /^runsc could not start sandbox sb-[a-z0-9]+: ./);
    assert.ok(logged.err.length > body.error.message.length + 10, `the log has no more than the body: ${logged.err}`);
    // The same line through the API, as an operator without the daemon's stdout reads it.
    const viaApi = await getDaemonLogs({ requestId: id }, d!.conn);
    assert.deepEqual(
      viaApi.entries.map((e) => [e.msg, e.err]),
      [['request failed', logged.err]],
    );
    const cli = spawnSync(path.join(REPO, 'bin/warren'), ['logs', '--request', id], {
      encoding: 'utf8',
      env: { ...process.env, WARREN_URL: d!.url, WARREN_API_KEY: d!.apiKey },
    });
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, new RegExp(`^\\S+Z ERROR request failed requestId=${id} .*err=runsc could not start sandbox sb-[a-z0-9]+: .+`));
    assert.match(cli.stdout, /\n {2}stack:\n {4}\S/);
    // The SDK names the request in its error, so a user can hand the id to the operator.
    await assert.rejects(d!.create({ snapshot: snap.id }), (e: Error) => e.message.includes('(request ') && !e.message.includes(d!.home));
    await Snapshots.delete(snap.id, d!.conn);
  } finally {
    await sbx.kill();
  }
});

test('errors: a failing template build step reports its step and output, and no host path', T, async () => {
  let err: TemplateBuildError | undefined;
  try {
    await Template.buildRecipe({ name: 'err-step', from: 'base', steps: [{ type: 'run', cmd: 'echo about to fail; ls /nonexistent-dir' }] }, d!.conn);
  } catch (e) {
    err = e as TemplateBuildError;
  }
  assert.ok(err instanceof TemplateBuildError, `the build did not fail as a build: ${String(err)}`);
  assert.match(err.message, /step 2\/2 .* failed with exit code 2/);
  assert.match(err.output ?? '', /about to fail/);
  assertNoHostPath(`${err.message}\n${err.output ?? ''}`);
});

test('errors: the log API refuses a bad query with what to fix, and finds nothing for an unknown request', T, async () => {
  const bad = await fetch(`${d!.url}/v1/logs?requestId=a%20b&level=loud`, { headers: { authorization: `Bearer ${d!.apiKey}` } });
  assert.equal(bad.status, 400);
  const text = await bad.text();
  assert.match(text, /requestId/);
  assert.match(text, /level/);
  const unknown = await fetch(`${d!.url}/v1/logs?request=x`, { headers: { authorization: `Bearer ${d!.apiKey}` } });
  assert.equal(unknown.status, 400);
  assert.match(await unknown.text(), /unknown query parameter request/);
  assert.equal((await fetch(`${d!.url}/v1/logs`)).status, 401);
  const none = await getDaemonLogs({ requestId: 'no-such-request' }, d!.conn);
  assert.deepEqual(none, { entries: [], truncated: false });
  // The daemon's own lines are there: it logged that it was listening.
  const started = await getDaemonLogs({ level: 'info', limit: 10_000 }, d!.conn);
  assert.ok(
    started.entries.some((e) => e.msg === 'warren daemon listening'),
    'the startup line is not in the log file',
  );
});

test('errors: every response carries an X-Request-Id, also 4xx ones; a 4xx body has no request id', T, async () => {
  const res = await fetch(`${d!.url}/v1/sandboxes/sb-nosuchthing`, { headers: { authorization: `Bearer ${d!.apiKey}` } });
  assert.equal(res.status, 404);
  assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  const body = (await res.json()) as { error: { requestId?: string } };
  assert.equal(body.error.requestId, undefined);
});
