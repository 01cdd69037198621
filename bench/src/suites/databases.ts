/**
 * Databases (docs/databases.md): `Database.create` (baked postgres template, password set,
 * database created, forward opened) and `db.branch` of a database holding 100 MB of table
 * data, each to a database that answers. Same-run baselines: a plain fork of a base-template
 * sandbox (what the brief compares with), and a plain fork of the database's own sandbox
 * through the sandbox API (the same memory and files without the database bookkeeping).
 * Interleaved, so load on the machine hits all rows alike.
 */
import { spawnSync } from 'node:child_process';
import { bake, Database, Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'databases';
const PSQL = '/usr/lib/postgresql/15/bin/psql';
/** 85,000 rows of ~1.2 KB: about 100 MB of table and TOAST data (measured and printed). */
const LOAD_SQL =
  "CREATE TABLE big AS SELECT g AS id, repeat(md5(g::text), 31) AS pad FROM generate_series(1, 85000) g; CHECKPOINT; SELECT pg_total_relation_size('big')";

function psql(url: string, sql: string): string {
  const r = spawnSync(PSQL, [url, '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8', timeout: 300_000 });
  if (r.status !== 0) throw new Error(`psql failed (${r.status}): ${r.stderr}${r.error ? r.error.message : ''}`);
  return r.stdout.trim();
}

export async function runDatabases(ctx: Context): Promise<void> {
  const n = ctx.iters.databases;
  const d = await ctx.getDaemon();
  const conn = d.conn;
  const creates: number[] = [];
  const branches: number[] = [];
  const forkBase: number[] = [];
  const forkSame: number[] = [];

  // Creates restore the baked template from the first one on, as they do on a daemon that ran a while.
  const baked = await bake('postgres', conn);
  if (baked.state !== 'ready') throw new Error(`the postgres template did not bake: ${JSON.stringify(baked)}`);
  const db = await Database.create('bench_db', conn);
  ctx.defer('remove database bench_db', () => db.delete().catch(() => undefined));
  const bytes = Number(psql(await db.url(), LOAD_SQL));
  const { sbx: base, kill: killBase } = await ctx.sandbox();
  const dbSandbox = await Sandbox.connect(db.info.sandboxId!, conn);

  for (let i = 0; i < n; i++) {
    let t0 = performance.now();
    const made = await Database.create(`bench_new${i}`, conn);
    creates.push(performance.now() - t0);
    await made.delete();

    t0 = performance.now();
    const branch = await db.branch(`bench_b${i}`);
    branches.push(performance.now() - t0);
    // Not timed: the branch answers with the data of the moment.
    if (i === 0 && psql(await branch.url(), 'SELECT count(*) FROM big') !== '85000') throw new Error('the branch does not hold the loaded table');
    await branch.delete();

    t0 = performance.now();
    const child = await base.fork();
    forkBase.push(performance.now() - t0);
    await child.kill();

    t0 = performance.now();
    const copy = await dbSandbox.fork();
    forkSame.push(performance.now() - t0);
    await copy.kill();
  }
  await killBase();

  // Point-in-time restore of the loaded database: its first base backup was taken right after
  // create, so a restore to now replays the whole load from archived WAL.
  const restores: number[] = [];
  const walBytes = Number(psql(await db.url(), "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"));
  for (let i = 0; i < Math.min(n, 2); i++) {
    const t0 = performance.now();
    const restored = await db.restore(`bench_r${i}`, new Date());
    restores.push(performance.now() - t0);
    if (i === 0 && psql(await restored.url(), 'SELECT count(*) FROM big') !== '85000') throw new Error('the restore does not hold the loaded table');
    await restored.delete();
  }

  const r = ctx.report;
  const baseRow = r.add({
    key: 'db-fork-base',
    suite: SUITE,
    label: 'sandbox fork of a base sandbox (same run)',
    unit: 'ms',
    values: forkBase,
    isBaseline: true,
  });
  r.add({ key: 'db-create', suite: SUITE, label: 'Database.create (baked postgres, password, forward)', unit: 'ms', values: creates, baseline: baseRow.key });
  const same = r.add({
    key: 'db-fork-same',
    suite: SUITE,
    label: `sandbox fork of the database's sandbox (${Math.round(bytes / 1e6)} MB table)`,
    unit: 'ms',
    values: forkSame,
    isBaseline: true,
  });
  r.add({ key: 'db-branch', suite: SUITE, label: `db.branch with a ${Math.round(bytes / 1e6)} MB table`, unit: 'ms', values: branches, baseline: same.key });
  r.add({
    key: 'db-restore',
    suite: SUITE,
    label: `db.restore to now: base backup + ${Math.round(walBytes / 1e6)} MB of WAL replayed`,
    unit: 'ms',
    values: restores,
    baseline: 'db-create',
  });
  const p50 = r.p50('db-branch');
  r.target('database branch of 100 MB p50 ≤ 1.5 s', p50 <= 1500, `p50 ${Math.round(p50)} ms (table ${Math.round(bytes / 1e6)} MB)`);
}
