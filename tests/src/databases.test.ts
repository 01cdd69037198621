/**
 * Databases (docs/databases.md): PostgreSQL in a sandbox, reached from the host with the real
 * `psql` through the daemon's forward; branches are independent live copies; the URL keeps
 * working across a daemon restart; passwords stay out of the log and of listings.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { ConflictError, Database, FailedPreconditionError, InvalidArgumentError, NotFoundError, Sandbox, Snapshots, type DatabaseInfo } from '@warren/sdk';
import { eventually, runWarren, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const PSQL = '/usr/lib/postgresql/15/bin/psql';
let d: DaemonHandle | undefined;

before(async () => {
  if (!existsSync(PSQL)) throw new Error(`${PSQL} is missing: install postgresql-client-15 on the host (scripts/setup.sh does)`);
  d = await startDaemon();
});
after(() => stopAndCheckClean(d));

/** Runs SQL through the URL with the host's psql; the password is in the URL, not on stdout. */
function psql(url: string, sql: string): { code: number; out: string; err: string } {
  const r = spawnSync(PSQL, [url, '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8', timeout: 30_000 });
  return { code: r.status ?? -1, out: r.stdout.trim(), err: r.stderr };
}
function sql(url: string, text: string): string {
  const r = psql(url, text);
  assert.equal(r.code, 0, `psql failed: ${r.err}`);
  return r.out;
}

function warren(...args: string[]): { code: number; stdout: string; stderr: string } {
  return runWarren(d!, args);
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

test('create, branch, branch of a branch: each is its own writable database; rm closes it; the URL survives a daemon restart', async () => {
  const db = await Database.create('app', d!.conn);
  assert.equal(db.info.state, 'running');
  assert.equal(db.info.database, 'app');
  assert.ok(db.info.hostPort);
  const url = await db.url();
  assert.match(url, /^postgres:\/\/postgres:[A-Za-z0-9_-]{43}@127\.0\.0\.1:\d+\/app$/);
  const password = new URL(url).password;
  sql(url, 'CREATE TABLE t (id int primary key, v text); INSERT INTO t VALUES (1, $$one$$), (2, $$two$$)');
  assert.equal(sql(url, 'SELECT count(*) FROM t'), '2');

  const branch = await db.branch('app_b1');
  assert.equal(branch.info.parent, 'app');
  assert.ok(branch.info.branchedAt && Date.parse(branch.info.branchedAt) <= Date.now());
  assert.notEqual(branch.info.sandboxId, db.info.sandboxId);
  const burl = await branch.url();
  assert.equal(new URL(burl).password, password, 'a branch keeps its parent password');
  assert.equal(sql(burl, 'SELECT count(*) FROM t'), '2', 'the branch has the data of the moment');
  sql(burl, 'INSERT INTO t VALUES (3, $$only in branch$$)');
  sql(url, 'INSERT INTO t VALUES (4, $$only in parent$$)');
  assert.equal(sql(url, 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM t'), '1,2,4');
  assert.equal(sql(burl, 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM t'), '1,2,3');

  const grand = await branch.branch('app_b2');
  const gurl = await grand.url();
  sql(gurl, 'DROP TABLE t');
  assert.equal(sql(burl, 'SELECT count(*) FROM t'), '3', 'dropping a table in a branch of a branch leaves its parent alone');
  assert.equal((await Database.get('app_b2', d!.conn)).info.parent, 'app_b1');

  const list = await Database.list(d!.conn);
  assert.deepEqual(
    list.map((x) => x.name),
    ['app', 'app_b1', 'app_b2'],
  );
  const listed = await d!.http.json<unknown>('GET', '/v1/databases');
  assert.ok(!JSON.stringify(listed).includes(password), 'GET /v1/databases never holds a password');
  assert.ok(!JSON.stringify(db.info).includes(password));
  const sandboxes = await Sandbox.list({ ...d!.conn, metadata: { 'warren.database': 'app' } });
  assert.deepEqual(
    sandboxes.map((s) => s.id),
    [db.info.sandboxId],
  );

  // A wrong password is refused: the server checks the SCRAM verifier the daemon set.
  assert.notEqual(psql(url.replace(password, 'wrong'), 'SELECT 1').code, 0);

  // rm: the sandbox goes, and so does the forward.
  const gport = grand.info.hostPort!;
  await grand.delete();
  assert.ok(await refused(gport), 'the forward of a removed database is closed');
  await assert.rejects(Database.get('app_b2', d!.conn), NotFoundError);
  await assert.rejects(Sandbox.connect(grand.info.sandboxId!, d!.conn), NotFoundError);

  // A daemon restart: forwards are re-opened on the same ports.
  const home = d!.home;
  await d!.stop();
  d = await startDaemon({ home });
  assert.equal(sql(url, 'SELECT count(*) FROM t'), '3');
  assert.equal(sql(burl, 'SELECT count(*) FROM t'), '3');
  assert.equal(await (await Database.get('app', d.conn)).url(), url);

  // The password was never logged, by either daemon.
  assert.ok(!d.log().includes(password), 'the daemon log holds no password');
  assert.ok(d.log().includes('database created') || d.log().includes('tcp forward opened'));

  await (await Database.get('app_b1', d.conn)).delete();
  await (await Database.get('app', d.conn)).delete();
  assert.deepEqual(await Database.list(d.conn), []);
});

test('bad input: names, unknown databases and snapshots, duplicates, a snapshot of another template', async () => {
  await assert.rejects(
    Database.create('Bad-Name', d!.conn),
    (e: Error) => e instanceof InvalidArgumentError && /\^\[a-z\]\[a-z0-9_\]\{0,62\}\$/.test(e.message),
  );
  await assert.rejects(Database.create('x'.repeat(64), d!.conn), InvalidArgumentError);
  await assert.rejects(Database.create('1abc', d!.conn), InvalidArgumentError);
  await assert.rejects(d!.http.json('GET', '/v1/databases/Bad-Name'), InvalidArgumentError);
  await assert.rejects(Database.get('nope', d!.conn), NotFoundError);
  await assert.rejects(d!.http.json('DELETE', '/v1/databases/nope'), NotFoundError);
  await assert.rejects(d!.http.json('POST', '/v1/databases/nope/branches', { json: { name: 'x' } }), NotFoundError);
  await assert.rejects(Database.create('fromnothing', { ...d!.conn, fromSnapshot: 'snap-doesnotexist' }), NotFoundError);

  // A snapshot of a sandbox of another template is not a database.
  const plain = await d!.create({ ttlSeconds: 300 });
  const snap = await plain.snapshot();
  await assert.rejects(
    Database.create('fromplain', { ...d!.conn, fromSnapshot: snap.id }),
    (e: Error) => e instanceof InvalidArgumentError && /template/.test(e.message),
  );
  await Snapshots.delete(snap.id, d!.conn);
  await plain.kill();

  // Duplicates: of a database, of one being created, of a branch name; branching one being created.
  const creating = Database.create('dup', d!.conn);
  // The name is reserved as soon as the create starts, long before PostgreSQL answers.
  const early = await eventually(() => d!.http.json<DatabaseInfo>('GET', '/v1/databases/dup').catch(() => undefined), 10_000, 'the name reserved', 10);
  assert.equal(early.state, 'creating');
  assert.equal(early.sandboxId, undefined);
  await assert.rejects(d!.http.json('POST', '/v1/databases/dup/branches', { json: { name: 'dup2' } }), FailedPreconditionError);
  await assert.rejects(d!.http.json('GET', '/v1/databases/dup/url'), FailedPreconditionError);
  await assert.rejects(Database.create('dup', d!.conn), ConflictError);
  const dup = await creating;
  await assert.rejects(dup.branch('dup'), ConflictError);
  assert.deepEqual(
    (await Database.list(d!.conn)).map((x) => x.name),
    ['dup'],
  );
  // Its sandbox killed behind its back: the database shows it, refuses branches and URLs, and is removed.
  await (await Sandbox.connect(dup.info.sandboxId!, d!.conn)).kill();
  const gone = await dup.refresh();
  assert.equal(gone.state, 'missing');
  assert.equal(gone.hostPort, undefined);
  await assert.rejects(dup.branch('dup3'), (e: Error) => e instanceof FailedPreconditionError && /missing/.test(e.message));
  await assert.rejects(dup.url(), FailedPreconditionError);
  await dup.delete();
  assert.deepEqual(await Database.list(d!.conn), []);
});

test('from a snapshot; the CLI round trip', async () => {
  const r1 = warren('db', 'create', 'cli_db');
  assert.equal(r1.code, 0, r1.stderr);
  assert.equal(r1.stdout, 'cli_db\n');
  assert.match(r1.stderr, /creating database cli_db/);
  const url = warren('db', 'url', 'cli_db').stdout.trim();
  sql(url, 'CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)');
  const password = new URL(url).password;

  const br = warren('db', 'branch', 'cli_db', 'cli_br');
  assert.equal(br.code, 0, br.stderr);
  const info = warren('db', 'info', 'cli_br');
  assert.equal(info.code, 0, info.stderr);
  assert.match(info.stdout, /parent\s+cli_db/);
  assert.match(info.stdout, /branched at\s+\d{4}-/);
  const ls = warren('db', 'ls');
  assert.match(ls.stdout, /^cli_br\s+running/m);
  assert.match(ls.stdout, /^cli_db\s+running/m);
  assert.ok(!ls.stdout.includes(password) && !info.stdout.includes(password), 'ls and info print no password');
  assert.equal(warren('db', 'info', 'nope').code, 2);

  // A snapshot of a database's sandbox starts a new database with its data and a new password.
  const sandboxId = (await Database.get('cli_db', d!.conn)).info.sandboxId!;
  const snap = await (await Sandbox.connect(sandboxId, d!.conn)).snapshot();
  const restored = warren('db', 'create', 'cli_restored', '--from-snapshot', snap.id);
  assert.equal(restored.code, 0, restored.stderr);
  const rurl = warren('db', 'url', 'cli_restored').stdout.trim();
  assert.notEqual(new URL(rurl).password, password, 'a database from a snapshot gets its own password');
  // NAME is a new, empty database in the restored cluster; the snapshot's own database came along.
  assert.equal(sql(rurl, "SELECT to_regclass('kept') IS NULL"), 't');
  const u = new URL(rurl);
  u.pathname = '/cli_db';
  assert.equal(sql(u.toString(), 'SELECT x FROM kept'), '42');
  await Snapshots.delete(snap.id, d!.conn);

  const rm = warren('db', 'rm', 'cli_br', 'cli_db', 'cli_restored');
  assert.equal(rm.code, 0, rm.stderr);
  assert.equal(rm.stdout, 'cli_br\ncli_db\ncli_restored\n');
  assert.ok(!d!.log().includes(password));
});
