/** `warren net` and `warren egress`: a sandbox's egress policy and its audit log. */
import type { Command } from 'commander';
import { Sandbox, type EgressEntry, type NetworkPolicyView } from '@warren/sdk';
import { CREDENTIAL_HELP, parseCredentialFlags } from './credentials.js';
import { Option } from 'commander';
import { collect, jsonText, positiveInt, printJson, safe, table } from './output.js';

const FOLLOW_POLL_MS = 1000;

export function registerNetworkCommands(program: Command): void {
  program
    .command('url')
    .description('a URL on the daemon for a port inside the sandbox (HTTP and WebSocket; open it in a browser on this machine)')
    .argument('<id>')
    .argument('<port>', 'port inside the sandbox', positiveInt('port'))
    .addOption(new Option('--ttl <seconds>', "how long the URL's token is valid (default 3600)").argParser(positiveInt('--ttl')))
    .action(async (id: string, port: number, opts: { ttl?: number }) => {
      const sbx = await Sandbox.connect(id);
      process.stdout.write(`${safe(await sbx.getUrl(port, opts.ttl ? { expiresInSeconds: opts.ttl } : {}))}\n`);
    });

  program
    .command('forward')
    .description("forward a TCP port inside the sandbox to the host's loopback (psql, redis-cli); without a port, list the forwards")
    .argument('<id>')
    .argument('[port]', 'port inside the sandbox', positiveInt('port'))
    .addOption(new Option('--host-port <port>', 'the port to listen on at 127.0.0.1 (default: a free one)').argParser(positiveInt('--host-port')))
    .option('--rm', 'close the forward of <port> and its connections')
    .option('--json', 'print JSON')
    .action(async (id: string, port: number | undefined, opts: { hostPort?: number; rm?: boolean; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      if (port === undefined) {
        if (opts.rm || opts.hostPort) throw new Error('--rm and --host-port need a port');
        const forwards = await sbx.forwards();
        if (opts.json) printJson(forwards);
        else process.stdout.write(table([['PORT', 'HOST', 'SINCE'], ...forwards.map((f) => [String(f.port), `127.0.0.1:${f.hostPort}`, f.createdAt])]));
        return;
      }
      if (opts.rm) {
        await sbx.closeForward(port);
        return;
      }
      const f = await sbx.forwardPort(port, opts.hostPort ? { hostPort: opts.hostPort } : {});
      if (opts.json) printJson(f);
      else process.stdout.write(`127.0.0.1:${f.hostPort}\n`);
    });

  program
    .command('net')
    .description('show or replace what a sandbox may reach through the egress proxy')
    .argument('<id>')
    .option(
      '--allow <rule>',
      'DOMAIN[:PORT], *.SUFFIX[:PORT], IP[/CIDR][:PORT] or a preset (@github, @npm, @pypi, @debian), repeatable; replaces the rules',
      collect,
      [],
    )
    .option('--credential <spec>', `${CREDENTIAL_HELP}; replaces the credentials (without --allow the rules stay)`, collect, [])
    .option('--deny-all', 'remove every rule and credential: nothing outside is reachable')
    .option('--json', 'print JSON')
    .action(async (id: string, opts: { allow: string[]; credential: string[]; denyAll?: boolean; json?: boolean }) => {
      if (opts.denyAll && (opts.allow.length || opts.credential.length)) throw new Error('give --allow/--credential or --deny-all, not both');
      const sbx = await Sandbox.connect(id);
      const credentials = parseCredentialFlags(opts.credential);
      let policy: NetworkPolicyView;
      if (opts.denyAll) policy = await sbx.setNetwork({ allow: [] });
      else if (opts.allow.length || credentials.length) {
        // A PUT replaces the whole policy: credentials alone keep the current rules.
        const allow = opts.allow.length ? opts.allow : (await sbx.getNetwork()).allow;
        policy = await sbx.setNetwork({ allow, ...(credentials.length ? { credentials } : {}) });
      } else policy = await sbx.getNetwork();
      if (opts.json) printJson(policy);
      else process.stdout.write(policyLines(policy));
    });

  program
    .command('egress')
    .description('the egress audit log of a sandbox: every attempt, allowed or refused')
    .argument('<id>')
    .option('--follow', 'keep printing new attempts until interrupted')
    .option('--json', 'print JSON lines')
    .action(async (id: string, opts: { follow?: boolean; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      let after = 0;
      let header = !opts.json;
      for (;;) {
        const entries = await sbx.egressLog({ after, limit: 1000 });
        after = entries.at(-1)?.id ?? after;
        if (opts.json) for (const e of entries) process.stdout.write(`${jsonText(e)}\n`);
        else if (entries.length || header) {
          process.stdout.write(egressRows(entries, header));
          header = false;
        }
        if (!opts.follow) return;
        if (entries.length < 1000) await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
      }
    });
}

/** One line per rule as given; a preset's expansion indented below it. */
export function policyLines(policy: NetworkPolicyView): string {
  const whose = policy.default ? `(the ${policy.default === 'template' ? "template's" : "daemon's"} default policy)\n` : '';
  if (!policy.allow.length) return `${whose}nothing allowed (all egress is refused)\n`;
  const credentials = (policy.credentials ?? []).map(
    (c) => `credential ${safe(c.host)}: ${safe(Object.keys(c.headers).join(', '))} (values are kept by the daemon)\n`,
  );
  const rules = policy.allow.map((r) => {
    const expansion = policy.presets?.[r];
    return `allow ${safe(r)}${expansion ? `, which expands to:\n${expansion.map((x) => `    ${safe(x)}\n`).join('')}` : '\n'}`;
  });
  return whose + rules.join('') + credentials.join('');
}

function egressRows(entries: EgressEntry[], header: boolean): string {
  const rows = header ? [['TIME', 'DECISION', 'METHOD', 'HOST', 'PORT', 'PATH', 'UP', 'DOWN', 'REASON']] : [];
  for (const e of entries) {
    rows.push([
      e.time.replace('T', ' ').slice(0, 23),
      e.decision,
      e.method ?? '-',
      e.host,
      String(e.port),
      e.path ?? '-',
      String(e.bytesUp),
      String(e.bytesDown),
      e.reason ?? '',
    ]);
  }
  return rows.length ? table(rows) : '';
}
