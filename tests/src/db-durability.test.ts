/**
 * Durability of a database's WAL archive (docs/databases.md, "Point-in-time restore"): the
 * archive's disk filling up loses nothing. The database keeps taking writes (its replication
 * slot keeps the WAL the archive has not taken), archiving catches up once there is room, and
 * a restore to a moment after the full disk has everything and passes pg_amcheck. And a
 * database sandbox killed for running out of memory leaves an archive that restores every
 * commit before it. The archives live on a small tmpfs mounted where the daemon keeps them
 * (removed with the daemon's home).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, statfsSync } from 'node:fs';
import path from 'node:path';
import { Database, Sandbox } from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const BIN = '/usr/lib/postgresql/15/bin';
let d: DaemonHandle | undefined;
let archives = '';

before(async () => {
  d = await startDaemon();
  archives = path.join(d.home, 'databases');
  mkdirSync(archives, { recursive: true });
  // Room for the first base backup and two 16 MB WAL segments, not for the load below.
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m,mode=0700', 'warren-test-archive', archives]);
});
after(async () => {
  // stopAndCheckClean unmounts what is left under the home too (also after a failure).
  if (archives) spawnSync('umount', ['-l', archives]);
  await stopAndCheckClean(d);
});

function sql(url: string, text: string): string {
  const r = spawnSync(`${BIN}/psql`, [url, '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-c', text], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(r.status, 0, `psql failed: ${r.stderr}`);
  return r.stdout.trim();
}

function freeBytes(): number {
  const s = statfsSync(archives);
  return s.bavail * s.bsize;
}

test('a full archive disk loses nothing: writes go on, archiving catches up when there is room, the restore has it all', async () => {
  const db = await Database.create('ledger', d!.conn);
  const url = await db.url();
  await eventually(async () => (await Database.get('ledger', d!.conn)).info.restorable, 120_000, 'the first base backup', 500);
  sql(url, 'CREATE TABLE entries (id int primary key, note text); INSERT INTO entries VALUES (1, $$before the full disk$$)');

  // About 100 MB of WAL: more than the archive's disk holds.
  sql(url, 'CREATE TABLE load AS SELECT g AS id, repeat(md5(g::text), 31) AS pad FROM generate_series(1, 85000) g');
  await eventually(() => freeBytes() < 16 * 1024 * 1024 || undefined, 60_000, 'the archive disk filled up');
  await eventually(() => d!.log().includes('No space left on device') || undefined, 60_000, 'the archiver reported the full disk');
  // The database does not depend on its archive: it takes writes meanwhile.
  sql(url, 'INSERT INTO entries VALUES (2, $$while the disk was full$$)');
  const written = Date.now();

  execFileSync('mount', ['-o', 'remount,size=768m', archives]);
  await eventually(
    async () => Date.parse((await Database.get('ledger', d!.conn)).info.restorable?.to ?? '0') > written + 500 || undefined,
    120_000,
    'archiving caught up after the disk had room again',
    500,
  );
  // To the end of the window (a receiver that restarted a moment ago reaches only the newest WAL it wrote).
  const back = await db.restore('ledger_back', new Date((await Database.get('ledger', d!.conn)).info.restorable!.to));
  const backUrl = await back.url();
  assert.equal(sql(backUrl, 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM entries'), '1,2');
  assert.equal(sql(backUrl, 'SELECT count(*) FROM load'), '85000');
  const check = spawnSync(`${BIN}/pg_amcheck`, ['--install-missing', '--heapallindexed', backUrl], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(check.status, 0, `pg_amcheck: ${check.stdout}${check.stderr}`);
  await back.delete();
  await db.delete();
});

test('a database sandbox that runs out of memory dies; its archive restores every commit before that, and pg_amcheck passes', async () => {
  const db = await Database.create('tally', d!.conn);
  const url = await db.url();
  await eventually(async () => (await Database.get('tally', d!.conn)).info.restorable, 120_000, 'the first base backup', 500);
  sql(url, 'CREATE TABLE t (id int primary key, note text); INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g');
  const committed = Date.now();
  await eventually(
    async () => Date.parse((await Database.get('tally', d!.conn)).info.restorable?.to ?? '0') > committed + 500 || undefined,
    60_000,
    'the commit archived',
    500,
  );
  // Something in the database's sandbox eats its memory (2 GB by default) until it is killed
  // with everything in it, PostgreSQL included, as a power cut would.
  const sbx = await Sandbox.connect(db.info.sandboxId!, d!.conn);
  const hog = await sbx
    .exec('/opt/warren/bin/node -e "const a=[]; for(;;) a.push(Buffer.alloc(16*1024*1024, 1))"', { timeoutSeconds: 300 })
    .catch((e: Error) => e);
  assert.ok(
    hog instanceof Error && /out of memory/.test(hog.message),
    `the sandbox died of its memory limit: ${hog instanceof Error ? hog.message : JSON.stringify(hog)}; the daemon's last words on it: ${d!
      .log()
      .split('\n')
      .filter((l) => l.includes(sbx.id))
      .slice(-8)
      .join('\n')}`,
  );
  assert.equal((await Database.get('tally', d!.conn)).info.state, 'dead');

  const to = (await Database.get('tally', d!.conn)).info.restorable!.to;
  const back = await db.restore('tally_back', new Date(to));
  const backUrl = await back.url();
  assert.equal(sql(backUrl, 'SELECT count(*) FROM t'), '1000');
  const check = spawnSync(`${BIN}/pg_amcheck`, ['--install-missing', '--heapallindexed', backUrl], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(check.status, 0, `pg_amcheck: ${check.stdout}${check.stderr}`);
  await back.delete();
  await db.delete();
});
