/** `warren db`: databases (PostgreSQL in a sandbox, docs/databases.md). */
import type { Command } from 'commander';
import { Database, Sandbox, type DatabaseInfo } from '@warren/sdk';
import { printJson, safe, table } from './output.js';
import { durationSeconds, parseWhen } from './usage.js';

/** Rows of `table` (which makes every cell safe). */
function infoText(d: DatabaseInfo): string {
  const rows: Array<[string, string | undefined]> = [
    ['name', d.name],
    ['database', d.database],
    ['state', d.state],
    ['sandbox', d.sandboxId],
    ['host port', d.hostPort === undefined ? undefined : `127.0.0.1:${d.hostPort}`],
    ['parent', d.parent],
    ['branched at', d.branchedAt],
    ['restored to', d.restoredTo],
    ['restorable', d.restorable ? `${d.restorable.from} .. ${d.restorable.to}` : 'not yet (no base backup)'],
    ['retention', `${Math.round(d.retainSeconds / 3600)} h`],
    ['created at', d.createdAt],
  ];
  return table(rows.filter((r): r is [string, string] => r[1] !== undefined));
}

function listText(list: DatabaseInfo[]): string {
  if (!list.length) return 'no databases\n';
  return table([
    ['NAME', 'STATE', 'PORT', 'PARENT', 'SANDBOX', 'CREATED'],
    ...list.map((d) => [d.name, d.state, d.hostPort === undefined ? '-' : String(d.hostPort), d.parent ?? '-', d.sandboxId ?? '-', d.createdAt]),
  ]);
}

export function registerDbCommands(program: Command): void {
  const db = program.command('db').description('databases: PostgreSQL in a sandbox, with instant branches');

  db.command('create')
    .description('create a database (prints its name; `warren db url NAME` gives the connection URL)')
    .argument('<name>')
    .option('--from-snapshot <id>', 'start from this snapshot of a database sandbox')
    .option('--retain <duration>', 'how long WAL and base backups are kept for restores: 30m, 12h, 7d (default 7d)')
    .option('--json', 'print JSON')
    .action(async (name: string, opts: { fromSnapshot?: string; retain?: string; json?: boolean }) => {
      if (!opts.json) process.stderr.write(`creating database ${safe(name)} (sandbox, PostgreSQL ready, password, forward)...\n`);
      const d = await Database.create(name, {
        ...(opts.fromSnapshot ? { fromSnapshot: opts.fromSnapshot } : {}),
        ...(opts.retain ? { retainSeconds: durationSeconds(opts.retain, '--retain') } : {}),
      });
      if (opts.json) printJson(d.info);
      else process.stdout.write(`${safe(d.name)}\n`);
    });

  db.command('attach')
    .description(
      'let a sandbox use a database, reached inside as NAME.db.warren:5432 (created for the sandbox, and removed with it, if none has that name); prints the URL to use inside, with the password',
    )
    .argument('<sandbox>')
    .argument('<name>')
    .option('--json', 'print JSON')
    .action(async (sandboxId: string, name: string, opts: { json?: boolean }) => {
      const used = await (await Sandbox.connect(sandboxId)).attachDatabase(name);
      if (opts.json) printJson(used);
      else process.stdout.write(`${safe(used.url)}\n`);
    });

  db.command('ls')
    .description('list databases (no passwords)')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const list = await Database.list();
      if (opts.json) printJson(list);
      else process.stdout.write(listText(list));
    });

  db.command('info')
    .description("a database's sandbox, state, host port, parent, branch or restore time, and the window a restore can reach")
    .argument('<name>')
    .option('--json', 'print JSON')
    .action(async (name: string, opts: { json?: boolean }) => {
      const d = await Database.get(name);
      if (opts.json) printJson(d.info);
      else process.stdout.write(infoText(d.info));
    });

  db.command('url')
    .description('print the postgres:// URL (with the password) to reach a database from this host')
    .argument('<name>')
    .action(async (name: string) => {
      process.stdout.write(`${safe(await (await Database.get(name)).url())}\n`);
    });

  db.command('branch')
    .description('a live, writable copy of a database at this instant, under a new name')
    .argument('<name>')
    .argument('<new>')
    .option('--json', 'print JSON')
    .action(async (name: string, newName: string, opts: { json?: boolean }) => {
      const d = await (await Database.get(name)).branch(newName);
      if (opts.json) printJson(d.info);
      else process.stdout.write(`${safe(d.name)}\n`);
    });

  db.command('restore')
    .description("a new database holding NAME's data as it was at --to, replayed from its WAL archive")
    .argument('<name>')
    .argument('<new>')
    .requiredOption('--to <time>', 'an ISO 8601 time (2026-12-04T10:42:00Z), or a duration ago (10m)', parseWhen('--to'))
    .option('--json', 'print JSON')
    .action(async (name: string, newName: string, opts: { to: Date; json?: boolean }) => {
      const to = opts.to;
      if (!opts.json) process.stderr.write(`restoring ${safe(name)} to ${to.toISOString()} as ${safe(newName)} (base backup, WAL replay)...\n`);
      const d = await (await Database.get(name)).restore(newName, to);
      if (opts.json) printJson(d.info);
      else process.stdout.write(`${safe(d.name)}\n`);
    });

  db.command('rm')
    .description('remove databases: their sandboxes are killed (branches stay)')
    .argument('<names...>')
    .action(async (names: string[]) => {
      for (const name of names) {
        await (await Database.get(name)).delete();
        process.stdout.write(`${safe(name)}\n`);
      }
    });
}
