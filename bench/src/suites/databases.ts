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

  const latency = await queryLatency(db, conn);
  const tps = await pgbenchTps(db, conn);

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

  r.add({
    key: 'db-query-inside',
    suite: SUITE,
    label: "SELECT 1 round trip: psql inside the database's sandbox, its loopback",
    unit: 'ms',
    values: latency.inside,
    isBaseline: true,
  });
  r.add({
    key: 'db-query-forward',
    suite: SUITE,
    label: "SELECT 1 round trip: the host's psql through the forward",
    unit: 'ms',
    values: latency.host,
    baseline: 'db-query-inside',
  });
  r.add({
    key: 'db-query-workspace',
    suite: SUITE,
    label: 'SELECT 1 round trip: psql in a workspace sandbox through db:NAME',
    unit: 'ms',
    values: latency.workspace,
    baseline: 'db-query-inside',
  });
  const extra = r.p50('db-query-forward') - r.p50('db-query-inside');
  r.target('query through the forward ≤ +1 ms p50', extra <= 1, `+${extra.toFixed(2)} ms p50`);
  r.add({
    key: 'db-pgbench-inside',
    suite: SUITE,
    label: "pgbench TPS (select-only, 1 client, 10 s): inside the database's sandbox",
    unit: 'tps',
    values: tps.inside,
    isBaseline: true,
  });
  r.add({
    key: 'db-pgbench-workspace',
    suite: SUITE,
    label: 'pgbench TPS (select-only, 1 client, 10 s): a workspace sandbox through db:NAME',
    unit: 'tps',
    values: tps.workspace,
    baseline: 'db-pgbench-inside',
  });
}

/** 300 `SELECT 1` in one psql session, each timed by psql itself (`\timing`): client-side round trips. */
const TIMED_QUERIES = `\\timing on\n${'SELECT 1;\n'.repeat(300)}`;

function timings(out: string): number[] {
  return [...out.matchAll(/^Time: ([0-9.]+) ms/gm)].map((m) => Number(m[1])).slice(20); // the first ones warm caches
}

/**
 * Query round trips three ways: psql inside the database's sandbox over its loopback (the
 * baseline), the host's psql through the daemon's forward, and psql in a workspace sandbox
 * (postgres template, for its client) through its `db:NAME` forwarder and the daemon.
 */
async function queryLatency(db: Database, conn: Parameters<typeof Sandbox.connect>[1]): Promise<{ inside: number[]; host: number[]; workspace: number[] }> {
  const url = await db.url();
  const password = new URL(url).password;
  const host = spawnSync(PSQL, [url, '-X', '-q', '-t', '-A'], { input: TIMED_QUERIES, encoding: 'utf8', timeout: 120_000 });
  if (host.status !== 0) throw new Error(`psql through the forward failed: ${host.stderr}`);
  const dbSandbox = await Sandbox.connect(db.info.sandboxId!, conn);
  const inside = await dbSandbox.exec(`${PSQL} "postgres://postgres:$PGPW@127.0.0.1:5432/${db.info.database}" -X -q -t -A`, {
    stdin: TIMED_QUERIES,
    env: { PGPW: password },
    user: 'postgres',
  });
  if (inside.exitCode !== 0) throw new Error(`psql inside failed: ${inside.stderr}`);
  const ws = await Sandbox.create({ ...conn, template: 'postgres', ttlSeconds: 900, databases: [db.name] });
  try {
    const viaRule = await ws.exec(`${PSQL} "$DATABASE_URL" -X -q -t -A`, { stdin: TIMED_QUERIES, user: 'postgres' });
    if (viaRule.exitCode !== 0) throw new Error(`psql in a workspace failed: ${viaRule.stderr}`);
    return { inside: timings(inside.stdout), host: timings(host.stdout), workspace: timings(viaRule.stdout) };
  } finally {
    await ws.kill();
  }
}

/** pgbench's built-in select-only script, 1 client for 10 s, three runs each way. */
async function pgbenchTps(db: Database, conn: Parameters<typeof Sandbox.connect>[1]): Promise<{ inside: number[]; workspace: number[] }> {
  const PGBENCH = '/usr/lib/postgresql/15/bin/pgbench';
  const password = new URL(await db.url()).password;
  const dbSandbox = await Sandbox.connect(db.info.sandboxId!, conn);
  const init = await dbSandbox.exec(`${PGBENCH} -i -q -s 2 -h /tmp -U postgres ${db.info.database}`, { user: 'postgres' });
  if (init.exitCode !== 0) throw new Error(`pgbench -i failed: ${init.stderr}`);
  const tpsOf = (out: string) => {
    const m = /tps = ([0-9.]+)/.exec(out);
    if (!m) throw new Error(`pgbench printed no tps: ${out}`);
    return Number(m[1]);
  };
  const ws = await Sandbox.create({ ...conn, template: 'postgres', ttlSeconds: 900, databases: [db.name] });
  const inside: number[] = [];
  const workspace: number[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      const a = await dbSandbox.exec(`${PGBENCH} -n -S -c 1 -T 10 "postgres://postgres:$PGPW@127.0.0.1:5432/${db.info.database}"`, {
        env: { PGPW: password },
        user: 'postgres',
      });
      if (a.exitCode !== 0) throw new Error(`pgbench inside failed: ${a.stderr}`);
      inside.push(tpsOf(a.stdout));
      const b = await ws.exec(`${PGBENCH} -n -S -c 1 -T 10 "$DATABASE_URL"`, { user: 'postgres' });
      if (b.exitCode !== 0) throw new Error(`pgbench in a workspace failed: ${b.stderr}`);
      workspace.push(tpsOf(b.stdout));
    }
  } finally {
    await ws.kill();
  }
  return { inside, workspace };
}
