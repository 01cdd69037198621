/**
 * The `warren` command line as a commander program, built without running it (main.ts
 * parses process.argv with it; tests parse their own argv).
 */
import { Command, Option } from 'commander';
import { Sandbox, WarrenError } from '@warren/sdk';
import { copy } from './cp.js';
import { copyDir } from './cp-dir.js';
import { registerTemplateCommands } from './template.js';
import { registerWarmCommands } from './warm.js';
import { registerUsageCommands } from './usage.js';
import { registerLogCommands } from './logs.js';
import { collect, keyValues, metadataText, positiveInt, positiveNumber, printJson, safe, sandboxRows } from './output.js';
import { registerMachineCommands } from './machine.js';
import { registerNetworkCommands } from './network.js';
import { CREDENTIAL_HELP, parseCredentialFlags } from './credentials.js';
import { cliVersion } from './version.js';
import { registerShellCommand } from './shell.js';
import { registerDbCommands } from './db.js';
import { registerKeyCommands } from './keys.js';
import { registerE2bCommands } from './e2b.js';
import { registerUiCommand } from './ui.js';
import { daemonOverrides, type DaemonFlags } from './daemon-flags.js';

/** Every command, as `warren` has them. */
export function buildProgram(): Command {
  const program = new Command();
  program
    .name('warren')
    .description('Sandboxes with their own kernel for AI coding agents')
    .version(cliVersion(), '-V, --version', 'print the version of this CLI')
    .showHelpAfterError();

  program
    .command('daemon')
    .description('run the warren daemon in the foreground')
    .addOption(
      new Option('--port <port>', 'TCP port on 127.0.0.1 (0 picks a free one; default $WARREN_PORT or 7070)').argParser((v) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`--port must be 0-65535, got '${v}'`);
        return n;
      }),
    )
    .option('--home <dir>', 'state directory (default $WARREN_HOME or /var/lib/warren)')
    .option('--listen <addr>', 'address to listen on, HOST or HOST:PORT (default $WARREN_HOST or 127.0.0.1); beyond loopback it needs TLS or --insecure')
    .option('--tls-cert <file>', 'serve HTTPS with this certificate (PEM; with --tls-key)')
    .option('--tls-key <file>', 'the private key of --tls-cert (PEM)')
    .option(
      '--tls-self-signed',
      'serve HTTPS with a certificate the daemon makes once under <home>/tls (prints its fingerprint; clients trust it with WARREN_CA_FILE)',
    )
    .option('--insecure', 'allow plain HTTP beyond loopback (API keys cross the network in clear text)')
    .action(async (opts: DaemonFlags) => {
      const { startDaemon } = await import('@warren/daemon');
      const d = await startDaemon(daemonOverrides(opts));
      // The fingerprint comes first: whoever waits for the "listening" line has it by then.
      if (d.tls) process.stderr.write(`TLS certificate ${d.tls.certFile}, SHA-256 fingerprint ${d.tls.fingerprint}\n`);
      process.stderr.write(`warren daemon listening on ${d.url}; admin API key in ${d.adminKeyFile}\n`);
      const stop = () => {
        d.close().then(
          () => process.exit(0),
          (err: unknown) => {
            process.stderr.write(`warren daemon: shutdown failed: ${safe(err instanceof Error ? err.message : String(err))}\n`);
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
    });

  program
    .command('create')
    .description('create a sandbox and print its id')
    .option('--template <name>', 'template to start from', 'base')
    .addOption(new Option('--ttl <seconds>', 'expire after this many seconds (default 3600)').argParser(positiveInt('--ttl')))
    .option('--metadata <k=v>', 'metadata, repeatable', collect, [])
    .option('--env <k=v>', 'environment for every command, repeatable', collect, [])
    .addOption(new Option('--cpus <n>', 'CPU limit, e.g. 0.5 or 2').argParser(positiveNumber('--cpus')))
    .addOption(new Option('--memory <MB>', 'memory limit in MB').argParser(positiveInt('--memory')))
    .addOption(new Option('--pids <n>', 'most processes inside').argParser(positiveInt('--pids')))
    .addOption(new Option('--disk <MB>', 'most disk its own writes may use, in MB').argParser(positiveInt('--disk')))
    .addOption(new Option('--idle <seconds>', 'hibernate after this many seconds without activity').argParser(positiveInt('--idle')))
    .option('--snapshot <id>', 'start from this snapshot instead of a template')
    .option(
      '--allow <rule>',
      "let the sandbox reach DOMAIN[:PORT], *.SUFFIX[:PORT], IP[/CIDR][:PORT] or a preset (@github, @npm, @pypi, @debian) through the egress proxy, repeatable (default: the template's default policy, else the daemon's, else nothing)",
      collect,
      [],
    )
    .option('--deny-all', "no egress at all, whatever the template's or the daemon's default policy")
    .option('--credential <spec>', CREDENTIAL_HELP, collect, [])
    .option(
      '--database <name>',
      'use this database, reached inside as NAME.db.warren:5432 with its URL in DATABASE_URL (first) and DATABASE_URL_NAME; created for the sandbox (and removed with it) if none has that name; forks get their own branches; repeatable',
      collect,
      [],
    )
    .option('--json', 'print the sandbox as JSON')
    .action(
      async (opts: {
        template: string;
        ttl?: number;
        metadata: string[];
        env: string[];
        cpus?: number;
        memory?: number;
        pids?: number;
        disk?: number;
        idle?: number;
        snapshot?: string;
        allow: string[];
        denyAll?: boolean;
        credential: string[];
        database: string[];
        json?: boolean;
      }) => {
        if (opts.denyAll && (opts.allow.length || opts.credential.length)) throw new Error('give --allow/--credential or --deny-all, not both');
        const credentials = parseCredentialFlags(opts.credential);
        // The daemon holds the bounds (static and this host's); it says which one a value breaks.
        const resources = {
          ...(opts.cpus !== undefined ? { cpus: opts.cpus } : {}),
          ...(opts.memory !== undefined ? { memoryMB: opts.memory } : {}),
          ...(opts.pids !== undefined ? { pids: opts.pids } : {}),
          ...(opts.disk !== undefined ? { diskMB: opts.disk } : {}),
        };
        const sbx = await Sandbox.create({
          template: opts.template,
          ttlSeconds: opts.ttl,
          idleSeconds: opts.idle,
          snapshot: opts.snapshot,
          // No flag: no policy in the request, so the template's or the daemon's default applies.
          ...(opts.allow.length || credentials.length || opts.denyAll
            ? { network: { allow: opts.allow, ...(credentials.length ? { credentials } : {}) } }
            : {}),
          metadata: keyValues(opts.metadata, '--metadata'),
          env: keyValues(opts.env, '--env'),
          ...(Object.keys(resources).length ? { resources } : {}),
          ...(opts.database.length ? { databases: opts.database } : {}),
        });
        if (opts.json) printJson(sbx.info);
        else process.stdout.write(`${safe(sbx.id)}\n`);
      },
    );

  program
    .command('ls')
    .description('list sandboxes')
    .option('--metadata <k=v>', 'only sandboxes with this metadata, repeatable', collect, [])
    .option('--state <state>', 'only sandboxes in this state (creating, running, hibernating, hibernated, dead)')
    .option('--json', 'print JSON')
    .action(async (opts: { metadata: string[]; state?: 'running'; json?: boolean }) => {
      const list = await Sandbox.list({ metadata: keyValues(opts.metadata, '--metadata'), state: opts.state });
      if (opts.json) printJson(list);
      else process.stdout.write(sandboxRows(list));
    });

  program
    .command('info')
    .description('show one sandbox')
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, opts: { json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      if (opts.json) printJson(sbx.info);
      else {
        const i = sbx.info;
        const lines: Array<[label: string, value: string]> = [
          ['id', i.id],
          ['state', i.state + (i.error ? ` (${i.error})` : '')],
          ['template', `${i.template} (version ${i.templateVersion})`],
          [
            'boot',
            {
              cold: 'cold boot',
              baked: 'restored from the baked image',
              pool: 'claimed from the warm pool',
              fork: `forked from ${i.source}`,
              snapshot: `restored from snapshot ${i.source}`,
            }[i.boot] ?? i.boot,
          ],
          ['created', i.createdAt],
          ['expires', i.expiresAt],
          ['idle', i.idleSeconds ? `hibernates after ${i.idleSeconds}s without activity` : 'never hibernates by itself'],
          ['disk', i.diskBytes === undefined ? '-' : `${(i.diskBytes / 1e6).toFixed(1)} MB${i.state === 'hibernated' ? ' (its saved image)' : ''}`],
          ['resources', `${i.resources.cpus} cpus, ${i.resources.memoryMB} MB memory, ${i.resources.pids} pids, ${i.resources.diskMB} MB disk`],
          ['metadata', metadataText(i.metadata, ', ') || '-'],
        ];
        for (const [k, v] of lines) process.stdout.write(`${k.padEnd(10)} ${safe(v)}\n`);
      }
    });

  program
    .command('exec')
    .description('run a command in a sandbox, streaming its output; exits with its exit code')
    .argument('<id>')
    .argument('<command...>', 'command and arguments (put them after --)')
    .addOption(new Option('--timeout <seconds>', 'kill the command after this long').argParser(positiveNumber('--timeout')))
    .option('--user <user>', 'run as this user (default user; root is allowed)')
    .option('--cwd <dir>', "working directory (default the user's home)")
    .option('--env <k=v>', 'environment variable, repeatable', collect, [])
    .option('-i, --interactive', "stream this command's stdin to the command, closing it at EOF (without -i stdin is not read)")
    .action(async (id: string, command: string[], opts: { timeout?: number; user?: string; cwd?: string; env: string[]; interactive?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      const r = await sbx.exec(command, {
        stdin: opts.interactive ? process.stdin : undefined,
        timeoutSeconds: opts.timeout,
        user: opts.user,
        cwd: opts.cwd,
        env: keyValues(opts.env, '--env'),
        onStdout: (d) => process.stdout.write(d),
        onStderr: (d) => process.stderr.write(d),
      });
      if (r.timedOut) process.stderr.write(`warren: command timed out after ${opts.timeout}s\n`);
      process.exitCode = r.timedOut ? 124 : (r.exitCode ?? 1);
    });

  program
    .command('cp')
    .description('copy a file, or with -r a directory, between the host and a sandbox (ID:/path on one side; - as host destination is stdout)')
    .argument('<src>')
    .argument('<dst>')
    .option('--user <user>', 'act as this user inside the sandbox')
    .option('-r, --recursive', 'copy a directory tree (as tar; modes, symlinks and times kept)')
    .action(async (src: string, dst: string, opts: { user?: string; recursive?: boolean }) => {
      if (opts.recursive) {
        process.stderr.write(`${await copyDir(src, dst, opts.user)}\n`);
        return;
      }
      const bytes = await copy(src, dst, opts.user);
      if (dst !== '-') process.stderr.write(`copied ${bytes} bytes\n`);
    });

  program
    .command('rm')
    .description('kill and remove sandboxes')
    .argument('<ids...>')
    .action(async (ids: string[]) => {
      for (const id of ids) {
        await (await Sandbox.connect(id)).kill();
        process.stdout.write(`${safe(id)}\n`);
      }
    });

  program
    .command('ttl')
    .description("extend a sandbox's time to live, counted from now")
    .argument('<id>')
    .argument('<seconds>', 'new time to live', positiveInt('seconds'))
    .action(async (id: string, seconds: number) => {
      const info = await (await Sandbox.connect(id)).setTtl(seconds);
      process.stdout.write(`${safe(id)} expires at ${safe(info.expiresAt)}\n`);
    });

  program
    .command('doctor')
    .description('check runsc, kernel features, storage, keys and the daemon; say how to fix what is missing')
    .action(async () => {
      // Loaded on use: doctor needs the daemon package, whose import alone cost every other
      // command (ls, exec, ...) three times the CPU of loading the SDK.
      const { doctor } = await import('./doctor.js');
      process.exitCode = (await doctor()) ? 0 : 1;
    });

  program
    .command('mcp')
    .description('run an MCP server on stdin/stdout whose tools act on the daemon (for Claude Code, Goose and other MCP clients)')
    .action(async () => {
      // The protocol owns stdout: nothing else may be printed there.
      const { serveStdio } = await import('@warren/mcp');
      await serveStdio();
    });

  registerTemplateCommands(program);
  registerMachineCommands(program);
  registerNetworkCommands(program);
  registerWarmCommands(program);
  registerUsageCommands(program);
  registerLogCommands(program);
  registerShellCommand(program);
  registerDbCommands(program);
  registerKeyCommands(program);
  registerE2bCommands(program);
  registerUiCommand(program);
  return program;
}

/** What `warren` prints and exits with when a command fails: 2 when something was not found. */
export function failure(err: unknown): { message: string; exitCode: number } {
  // The daemon's messages quote what callers and sandboxes sent (paths, keys, hosts).
  return {
    message: `warren: ${safe(err instanceof Error ? err.message : String(err))}\n`,
    exitCode: err instanceof WarrenError && err.code === 'not_found' ? 2 : 1,
  };
}
