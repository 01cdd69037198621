/**
 * Databases of a workspace (docs/databases.md): a sandbox created with databases reaches them
 * inside through DATABASE_URL; forkTree(3) gives each child its own branch at the fork's
 * instant under the same URL; what was made for a sandbox hibernates, resumes and goes with it;
 * an attached database that existed before outlives it. Real PostgreSQL, real psql inside.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ConflictError, Database, InvalidArgumentError, NotFoundError, Sandbox } from '@warren/sdk';
import { eventually, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon();
});
after(() => stopAndCheckClean(d));

/** Runs SQL inside the sandbox with the `dev` template's psql and the URL the variable holds. */
async function sql(sbx: Sandbox, text: string, variable = 'DATABASE_URL', env: Record<string, string> = {}): Promise<string> {
  const r = await sbx.exec(['psql', `$${variable}`, '-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1'].join(' '), { stdin: text, env });
  assert.equal(r.exitCode, 0, `psql inside ${sbx.id} failed: ${r.stderr}`);
  return r.stdout.trim();
}

async function gone(name: string): Promise<true | undefined> {
  return (
    (await Database.get(name, d!.conn).then(
      () => false,
      (err: unknown) => err instanceof NotFoundError,
    )) || undefined
  );
}

test('a workspace made with a database: DATABASE_URL inside; forkTree(3) gives three independent branches; its end removes them', async () => {
  const ws = await d!.create({ template: 'dev', ttlSeconds: 900, databases: ['shop'] });
  const env = (await ws.exec('printf "%s\\n%s" "$DATABASE_URL" "$DATABASE_URL_SHOP"')).stdout.split('\n');
  assert.match(env[0]!, /^postgres:\/\/postgres:[A-Za-z0-9_-]{43}@shop\.db\.warren:5432\/shop$/);
  assert.equal(env[1], env[0], 'DATABASE_URL_SHOP holds the same URL');
  assert.deepEqual(await ws.databases(), [{ alias: 'shop', name: 'shop', owned: true, host: 'shop.db.warren', port: 5432, env: 'DATABASE_URL' }]);
  assert.ok((await ws.getNetwork()).allow.includes('db:shop'), 'the daemon added the db: rule to its policy');
  await sql(ws, 'CREATE TABLE orders (id int); INSERT INTO orders VALUES (1);');

  // A transaction left open in the parent is not in the children: each branch holds what
  // was committed at the fork's instant.
  const children = await ws.forkTree(3);
  const names = new Set<string>();
  for (const [i, child] of children.entries()) {
    const [use] = await child.databases();
    assert.ok(use && use.alias === 'shop' && use.owned && use.name !== 'shop', `child ${i} uses its own branch: ${JSON.stringify(use)}`);
    names.add(use.name);
    assert.equal((await Database.get(use.name, d!.conn)).info.parent, 'shop');
    // The same URL as the parent's, in the child's copy of the environment.
    assert.equal((await child.exec('printf %s "$DATABASE_URL"')).stdout, env[0]);
    await sql(child, `INSERT INTO orders VALUES (${10 + i});`);
  }
  assert.equal(names.size, 3, 'three distinct branches');
  for (const [i, child] of children.entries()) assert.equal(await sql(child, 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM orders'), `1,${10 + i}`);
  assert.equal(await sql(ws, 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM orders'), '1', "the children's writes stay out of the parent's database");

  // A child's end removes its branch; the parent's end removes the database made for it.
  const [first] = [...names];
  await children[0]!.kill();
  await eventually(() => gone(first!), 30_000, `branch ${first} removed with its sandbox`);
  for (const child of children.slice(1)) await child.kill();
  await ws.kill();
  await eventually(async () => (await Database.list(d!.conn)).length === 0 || undefined, 60_000, 'shop and every branch removed with their sandboxes');
  assert.equal(d!.log().includes(new URL(env[0]!).password), false, 'the password in DATABASE_URL is not in the daemon log');
});

test('attaching: an existing database outlives the sandbox; one made for another sandbox is refused; bad names are 400', async () => {
  const ext = await Database.create('ledger', d!.conn);
  const sbx = await d!.create({ template: 'dev', ttlSeconds: 600 });
  try {
    const attached = await sbx.attachDatabase('ledger');
    assert.equal(attached.owned, false);
    assert.match(attached.url, /@ledger\.db\.warren:5432\/ledger$/);
    assert.equal(await sql(sbx, 'SELECT 41 + 1', 'URL', { URL: attached.url }), '42');
    // Asking again answers the same use.
    assert.equal((await sbx.attachDatabase('ledger')).url, attached.url);
    // A second database, created for the sandbox because none has the name.
    const scratch = await sbx.attachDatabase('scratch');
    assert.equal(scratch.owned, true);
    assert.equal(await sql(sbx, 'SELECT current_database()', 'URL', { URL: scratch.url }), 'scratch');
    assert.deepEqual(
      (await sbx.databases()).map((u) => [u.alias, u.env]),
      [
        ['ledger', 'DATABASE_URL'],
        ['scratch', 'DATABASE_URL_SCRATCH'],
      ],
    );

    const other = await d!.create({ ttlSeconds: 600 });
    await assert.rejects(other.attachDatabase('scratch'), (err: Error) => err instanceof ConflictError && err.message.includes(sbx.id));
    await assert.rejects(d!.create({ databases: ['scratch'] }), ConflictError);
    await assert.rejects(d!.create({ databases: ['Bad-Name'] }), (err: Error) => err instanceof InvalidArgumentError && err.message.includes('databases'));
    await assert.rejects(other.attachDatabase('x-y'), InvalidArgumentError);
    await other.kill();
  } finally {
    await sbx.kill();
  }
  await eventually(() => gone('scratch'), 30_000, 'scratch removed with its sandbox');
  assert.equal((await Database.get('ledger', d!.conn)).info.state, 'running', 'an attached database outlives the sandbox');
  await ext.delete();
});

test('a workspace hibernates and resumes its databases with it; its TTL ends them too', async () => {
  const ws = await d!.create({ template: 'dev', ttlSeconds: 600, databases: ['notes'] });
  await sql(ws, 'CREATE TABLE n (v text); INSERT INTO n VALUES ($$kept$$);');
  const db = await Database.get('notes', d!.conn);
  await ws.hibernate();
  await eventually(async () => (await Database.get('notes', d!.conn)).info.state === 'hibernated' || undefined, 60_000, 'notes hibernated with its workspace');
  // Any call resumes the workspace, and its database follows.
  assert.equal(await sql(ws, 'SELECT v FROM n'), 'kept');
  await eventually(async () => (await Database.get('notes', d!.conn)).info.state === 'running' || undefined, 60_000, 'notes resumed with its workspace');
  assert.equal((await Sandbox.connect(db.info.sandboxId!, d!.conn)).info.state, 'running');

  const short = await d!.create({ ttlSeconds: 3, databases: ['brief'] });
  await eventually(() => gone('brief'), 60_000, 'brief removed when its sandbox expired');
  await assert.rejects(Sandbox.connect(short.id, d!.conn), NotFoundError);
  await ws.kill();
  await eventually(() => gone('notes'), 30_000, 'notes removed with its sandbox');
});
