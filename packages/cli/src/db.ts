/** `warren db`: databases (PostgreSQL in a sandbox, docs/databases.md). */
import type { Command } from 'commander';
import { Database, type DatabaseInfo } from '@warren/sdk';
import { printJson, safe, table } from './output.js';

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
    .option('--json', 'print JSON')
    .action(async (name: string, opts: { fromSnapshot?: string; json?: boolean }) => {
      if (!opts.json) process.stderr.write(`creating database ${safe(name)} (sandbox, PostgreSQL ready, password, forward)...\n`);
      const d = await Database.create(name, opts.fromSnapshot ? { fromSnapshot: opts.fromSnapshot } : {});
      if (opts.json) printJson(d.info);
      else process.stdout.write(`${safe(d.name)}\n`);
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
    .description("a database's sandbox, state, host port, parent and branch time")
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
