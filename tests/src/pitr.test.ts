/**
 * Point-in-time restore and `db:NAME` rules (docs/databases.md), against a real daemon: the
 * daemon archives a database's WAL with the host's pg_receivewal and takes a base backup; a
 * restore to a moment between two commits has the first and not the second; pg_amcheck passes
 * on the result; a daemon killed -9 mid-archive loses nothing; a workspace sandbox reaches
 * the database only through its `db:NAME` rule, audited.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { Database, InvalidArgumentError, type DatabaseInfo } from '@warren/sdk';
import { eventually, sleep, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const BIN = '/usr/lib/postgresql/15/bin';
let d: DaemonHandle | undefined;

before(async () => {
  for (const tool of ['psql', 'pg_receivewal', 'pg_basebackup', 'pg_amcheck'])
    if (!existsSync(`${BIN}/${tool}`)) throw new Error(`${BIN}/${tool} is missing: install postgresql-client-15 on the host (scripts/setup.sh does)`);
  d = await startDaemon();
});
after(() => stopAndCheckClean(d));

function sql(url: string, text: string): string {
  const r = spawnSync(`${BIN}/psql`, [url, '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-c', text], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, `psql failed: ${r.stderr}`);
  return r.stdout.trim();
}

async function restorable(db: Database): Promise<NonNullable<DatabaseInfo['restorable']>> {
  return eventually(async () => (await Database.get(db.name, d!.conn)).info.restorable, 120_000, `database ${db.name} has a base backup`, 500);
}

test('restore to a moment between two commits; to now; refused outside the window; pg_amcheck passes', async () => {
  const db = await Database.create('ledger', { ...d!.conn, retainSeconds: 3600 });
  assert.equal(db.info.retainSeconds, 3600);
  const url = await db.url();
  await restorable(db);
  sql(url, 'CREATE TABLE entries (id int primary key, note text); INSERT INTO entries VALUES (1, $$first$$)');
  await sleep(1500);
  const between = new Date();
  await sleep(1500);
  sql(url, 'INSERT INTO entries VALUES (2, $$second$$)');
  await sleep(1000);

  const past = await db.restore('ledger_before', between);
  assert.equal(past.info.parent, 'ledger');
  assert.equal(past.info.restoredTo, between.toISOString());
  const pastUrl = await past.url();
  assert.equal(sql(pastUrl, 'SELECT string_agg(note, $$,$$ ORDER BY id) FROM entries'), 'first');
  // Open for writes, on its own.
  sql(pastUrl, 'INSERT INTO entries VALUES (3, $$only in the restore$$)');
  assert.equal(sql(url, 'SELECT count(*) FROM entries'), '2');
  const check = spawnSync(`${BIN}/pg_amcheck`, ['--install-missing', '--heapallindexed', pastUrl], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(check.status, 0, `pg_amcheck: ${check.stdout}${check.stderr}`);

  // After the last commit: everything the archive has.
  const now = await db.restore('ledger_now', new Date());
  assert.equal(sql(await now.url(), 'SELECT count(*) FROM entries'), '2');

  await assert.rejects(
    db.restore('ledger_future', new Date(Date.now() + 3600_000)),
    (e: Error) => e instanceof InvalidArgumentError && /in the future/.test(e.message),
  );
  await assert.rejects(
    db.restore('ledger_early', new Date(Date.now() - 24 * 3600_000)),
    (e: Error) => e instanceof InvalidArgumentError && /outside database ledger's restorable window \d{4}-.* \.\. \d{4}-/.test(e.message),
  );
  await assert.rejects(db.restore('Bad Name', new Date()), InvalidArgumentError);
  assert.equal(d!.log().includes(new URL(url).password), false, 'the password is not in the daemon log');
  for (const x of [past, now, db]) await x.delete();
});

test('a daemon killed -9 mid-archive loses nothing: after its restart, commits from before and after restore', async () => {
  const db = await Database.create('journal', d!.conn);
  await restorable(db);
  const url = await db.url();
  sql(url, 'CREATE TABLE j (id int); INSERT INTO j VALUES (1)');
  await d!.crash();
  d = await startDaemon({ home: d!.home });
  sql(url, 'INSERT INTO j VALUES (2)');
  const inserted = Date.now();
  // The new daemon's pg_receivewal has caught up once the window reaches past the insert.
  await eventually(
    async () => Date.parse((await Database.get('journal', d!.conn)).info.restorable?.to ?? '0') > inserted + 500 || undefined,
    60_000,
    'archiving resumed',
  );
  // To the end of the window: a receiver that started a moment ago reaches only the newest WAL it wrote, not now.
  const journal = await Database.get('journal', d!.conn);
  const back = await journal.restore('journal_back', new Date(journal.info.restorable!.to));
  assert.equal(sql(await back.url(), 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM j'), '1,2');
  await back.delete();
  await (await Database.get('journal', d!.conn)).delete();
});

test('db:NAME: a workspace reaches that database at NAME.db.warren:5432, nothing else, and it is audited', async () => {
  const db = await Database.create('shop', d!.conn);
  const url = new URL(await db.url());
  sql(url.href, 'CREATE TABLE items (n int); INSERT INTO items VALUES (42)');
  const inside = `postgres://postgres:${url.password}@shop.db.warren:5432/shop`;
  // The postgres template has psql; any template works as the workspace.
  const ws = await d!.create({ template: 'postgres', network: { allow: ['db:shop'] } });
  try {
    const r = await ws.exec(['psql', inside, '-X', '-At', '-c', 'SELECT n FROM items'], { user: 'user' });
    assert.equal(r.stdout.trim(), '42', r.stderr);
    const other = await ws.exec(['psql', `postgres://postgres:x@ledger.db.warren:5432/ledger`, '-X', '-At', '-c', 'SELECT 1'], { user: 'user' });
    assert.notEqual(other.exitCode, 0, 'no rule names ledger');
    // The entry's byte counts are written when the relay sees the connection close, a moment after psql exits.
    await eventually(
      async () =>
        (await ws.egressLog()).some((e) => e.host === 'shop.db.warren' && e.port === 5432 && e.decision === 'allowed' && e.bytesDown > 0) || undefined,
      10_000,
      'an audited connection to shop with bytes counted',
    );
    const log = await ws.egressLog();
    assert.equal(JSON.stringify(log).includes(url.password), false, 'no password in the audit log');
  } finally {
    await ws.kill();
    await db.delete();
  }
});
