/** `warren hibernate|resume|fork|snapshot`: whole-machine saves of a running sandbox. */
import { Option, type Command } from 'commander';
import { Sandbox, Snapshots, type SnapshotInfo } from '@warren/sdk';
import { collect, keyValues, positiveInt, printJson, safe, table } from './output.js';

export function registerMachineCommands(program: Command): void {
  program
    .command('hibernate')
    .description('save a sandbox (memory, processes, files) to disk and free its RAM; any later call resumes it')
    .argument('<ids...>')
    .action(async (ids: string[]) => {
      for (const id of ids) {
        const started = Date.now();
        await (await Sandbox.connect(id)).hibernate();
        process.stdout.write(`${safe(id)} hibernated in ${Date.now() - started} ms\n`);
      }
    });

  program
    .command('resume')
    .description('resume a hibernated sandbox now (any exec, file or process call also does)')
    .argument('<ids...>')
    .action(async (ids: string[]) => {
      for (const id of ids) {
        const started = Date.now();
        await (await Sandbox.connect(id)).resume();
        process.stdout.write(`${safe(id)} running (resumed in ${Date.now() - started} ms)\n`);
      }
    });

  program
    .command('fork')
    .description('new sandboxes that continue from this instant of a running one (memory, processes, files); prints their ids')
    .argument('<id>')
    .addOption(new Option('--count <n>', 'how many children').argParser(positiveInt('--count')).default(1))
    .option('--metadata <k=v>', "metadata of the children (default: the parent's), repeatable", collect, [])
    .addOption(new Option('--ttl <seconds>', 'TTL of the children (default 3600)').argParser(positiveInt('--ttl')))
    .option('--json', 'print the children as JSON')
    .action(async (id: string, opts: { count: number; metadata: string[]; ttl?: number; json?: boolean }) => {
      const metadata = keyValues(opts.metadata, '--metadata');
      const children = await (await Sandbox.connect(id)).forkTree(opts.count, {
        ...(Object.keys(metadata).length ? { metadata } : {}),
        ttlSeconds: opts.ttl,
      });
      if (opts.json) printJson(children.map((c) => c.info));
      else for (const c of children) process.stdout.write(`${safe(c.id)}\n`);
    });

  const snapshot = program.command('snapshot').description('take, list and delete snapshots');

  snapshot
    .command('create')
    .description('save a sandbox (memory, processes, files) as a snapshot; it keeps running. Prints the snapshot id')
    .argument('<sandbox>')
    .option('--metadata <k=v>', "metadata of the snapshot (default: the sandbox's), repeatable", collect, [])
    .option('--json', 'print the snapshot as JSON')
    .action(async (id: string, opts: { metadata: string[]; json?: boolean }) => {
      const metadata = keyValues(opts.metadata, '--metadata');
      const snap = await (await Sandbox.connect(id)).snapshot(Object.keys(metadata).length ? { metadata } : {});
      if (opts.json) printJson(snap);
      else process.stdout.write(`${safe(snap.id)}\n`);
    });

  snapshot
    .command('ls')
    .description('list snapshots')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const list = await Snapshots.list();
      if (opts.json) printJson(list);
      else process.stdout.write(snapshotRows(list));
    });

  snapshot
    .command('rm')
    .description('delete snapshots and their images')
    .argument('<ids...>')
    .action(async (ids: string[]) => {
      for (const id of ids) {
        await Snapshots.delete(id);
        process.stdout.write(`${safe(id)}\n`);
      }
    });
}

function snapshotRows(list: SnapshotInfo[]): string {
  const rows = [['ID', 'SANDBOX', 'TEMPLATE', 'CREATED', 'SIZE']];
  for (const s of list) rows.push([s.id, s.sandboxId, s.template, s.createdAt.replace('T', ' ').slice(0, 19), `${(s.sizeBytes / 1e6).toFixed(1)} MB`]);
  return table(rows);
}
