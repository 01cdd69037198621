/** `warren key`: API keys with scopes and an expiry (admin keys only; docs/security.md). */
import type { Command } from 'commander';
import {
  ApiKeys,
  getAuditTrail,
  Sandbox,
  SANDBOX_TOKEN_SCOPES,
  SCOPES,
  type ApiKeyInfo,
  type KeyQuotas,
  type NewApiKey,
  type SandboxTokenScope,
  type Scope,
} from '@warren/sdk';
import { collect, positiveInt, printJson, safe, table } from './output.js';
import { durationSeconds, parseWhen } from './usage.js';

function infoText(k: ApiKeyInfo): string {
  const rows: Array<[string, string | undefined]> = [
    ['id', k.id],
    ['name', k.name],
    ['state', k.state],
    ['scopes', k.scopes.join(' ')],
    [
      'quotas',
      k.quotas
        ? Object.entries(k.quotas)
            .map(([q, n]) => `${q}=${n}`)
            .join(' ')
        : undefined,
    ],
    ['egress', k.egress ? k.egress.join(' ') || '(none)' : undefined],
    ['created at', k.createdAt],
    ['expires at', k.expiresAt],
    ['rotated at', k.rotatedAt],
    ['revoked at', k.revokedAt],
  ];
  return table(rows.filter((r): r is [string, string] => r[1] !== undefined));
}

/** The secret on stdout alone (for `$(...)`), what it is on stderr. */
function printSecret(k: NewApiKey, json: boolean | undefined): void {
  if (json) {
    printJson(k);
    return;
  }
  process.stderr.write(`API key ${safe(k.id)} (${safe(k.name)}), scopes ${k.scopes.join(' ')}: the secret is shown this once\n`);
  process.stdout.write(`${safe(k.key)}\n`);
}

function scopeList(values: string[]): Scope[] | undefined {
  if (!values.length) return undefined;
  const scopes = values
    .flatMap((v) => v.split(','))
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (bad.length) throw new Error(`unknown scope ${bad.join(', ')}; the scopes are ${SCOPES.join(', ')}`);
  return scopes as Scope[];
}

const QUOTA_NAMES = ['sandboxes', 'vcpus', 'memoryMB', 'createsPerMinute', 'forksPerMinute', 'hibernatedDiskMB'] as const;

function quotaList(values: string[]): KeyQuotas | undefined {
  if (!values.length) return undefined;
  const quotas: Record<string, number> = {};
  for (const pair of values.flatMap((v) => v.split(','))) {
    const [name, value] = pair.split('=');
    if (!name || !(QUOTA_NAMES as readonly string[]).includes(name.trim()) || value === undefined || !Number.isFinite(Number(value)))
      throw new Error(`--quota takes LIMIT=NUMBER with LIMIT one of ${QUOTA_NAMES.join(', ')} (got '${pair}')`);
    quotas[name.trim()] = Number(value);
  }
  return quotas as KeyQuotas;
}

export function registerKeyCommands(program: Command): void {
  const key = program.command('key').description('API keys for other callers: scopes, expiry, rotation (needs the admin key)');

  key
    .command('create')
    .description('create an API key and print its secret (shown this once; stored hashed)')
    .requiredOption('--name <name>', 'what the key is for (letters, digits, spaces, . _ - @)')
    .option('--scope <scope>', `what it may do, repeatable or comma-separated: ${SCOPES.join(', ')} (default: all but admin)`, collect, [])
    .option('--expires <duration>', 'stop working after this long: 30m, 12h, 30d (default: never)')
    .option('--quota <limit=n>', `a limit, repeatable: ${QUOTA_NAMES.join(', ')} (default: none)`, collect, [])
    .option('--egress <rule>', 'an egress allow rule the key may grant (host, host:port, @preset), repeatable (default: any)', collect, [])
    .option('--json', 'print JSON (with the secret)')
    .action(async (opts: { name: string; scope: string[]; expires?: string; quota: string[]; egress: string[]; json?: boolean }) => {
      const scopes = scopeList(opts.scope);
      const quotas = quotaList(opts.quota);
      const made = await ApiKeys.create({
        name: opts.name,
        ...(scopes ? { scopes } : {}),
        ...(quotas ? { quotas } : {}),
        ...(opts.egress.length ? { egress: opts.egress } : {}),
        ...(opts.expires ? { expiresInSeconds: durationSeconds(opts.expires, '--expires') } : {}),
      });
      printSecret(made, opts.json);
    });

  key
    .command('ls')
    .description('list API keys (never their secrets)')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const list = await ApiKeys.list();
      if (opts.json) {
        printJson(list);
        return;
      }
      process.stdout.write(
        table([['ID', 'NAME', 'STATE', 'SCOPES', 'EXPIRES'], ...list.map((k) => [k.id, k.name, k.state, k.scopes.join(','), k.expiresAt ?? 'never'])]),
      );
    });

  key
    .command('info')
    .description("one API key's scopes, state and times")
    .argument('<id>')
    .option('--json', 'print JSON')
    .action(async (id: string, opts: { json?: boolean }) => {
      const k = await ApiKeys.get(id);
      if (opts.json) printJson(k);
      else process.stdout.write(infoText(k));
    });

  key
    .command('rotate')
    .description('give an API key a new secret and print it; the old secret stops working at once')
    .argument('<id>')
    .option('--json', 'print JSON (with the secret)')
    .action(async (id: string, opts: { json?: boolean }) => printSecret(await ApiKeys.rotate(id), opts.json));

  key
    .command('revoke')
    .description('make API keys stop working (what they made keeps running; the admin key can end it)')
    .argument('<ids...>')
    .action(async (ids: string[]) => {
      for (const id of ids) process.stdout.write(`${safe((await ApiKeys.revoke(id)).id)}\n`);
    });

  program
    .command('audit')
    .description('the API audit trail (admin key): every call that changed something, who made it, on what, and its status')
    .option('--key <id>', 'only calls made with this API key (and with the sandbox tokens it made)')
    .option('--sandbox <id>', 'only calls on this sandbox')
    .option('--since <when>', 'from this time: ISO 8601, or a duration back from now (30m, 2h, 7d)')
    .option('--limit <n>', 'at most this many entries, oldest first (default 1000)', positiveInt('--limit'))
    .option('--json', 'print JSON')
    .action(async (opts: { key?: string; sandbox?: string; since?: string; limit?: number; json?: boolean }) => {
      const entries = await getAuditTrail({
        ...(opts.key ? { key: opts.key } : {}),
        ...(opts.sandbox ? { sandbox: opts.sandbox } : {}),
        ...(opts.since ? { since: parseWhen('--since')(opts.since) } : {}),
        ...(opts.limit ? { limit: opts.limit } : {}),
      });
      if (opts.json) {
        printJson(entries);
        return;
      }
      if (!entries.length) {
        process.stdout.write('no audited calls\n');
        return;
      }
      process.stdout.write(
        table([
          ['TIME', 'KEY', 'STATUS', 'METHOD', 'PATH', 'REQUEST'],
          ...entries.map((e) => [
            e.time.replace('T', ' ').slice(0, 23),
            e.tokenId ? `${e.keyId ?? '-'} (${e.tokenId})` : (e.keyId ?? '-'),
            String(e.status),
            e.method,
            e.path,
            e.requestId,
          ]),
        ]),
      );
    });

  const token = program.command('token').description('tokens for one sandbox, to hand to an agent or a browser instead of a key');

  token
    .command('create')
    .description('make a token for the sandbox and print it (shown this once): it reaches that sandbox only, with its scopes, until it expires')
    .argument('<sandbox>')
    .option('--scope <scope>', `what it may do there, repeatable or comma-separated: ${SANDBOX_TOKEN_SCOPES.join(', ')}`, collect, [])
    .option('--ttl <duration>', 'how long it works: 10m, 1h, 7d (default 1h, at most 30d)')
    .option('--json', 'print JSON (with the token)')
    .action(async (sandboxId: string, opts: { scope: string[]; ttl?: string; json?: boolean }) => {
      const scopes = opts.scope
        .flatMap((v) => v.split(','))
        .map((s) => s.trim())
        .filter(Boolean);
      const bad = scopes.filter((s) => !(SANDBOX_TOKEN_SCOPES as readonly string[]).includes(s));
      if (!scopes.length || bad.length)
        throw new Error(`--scope takes ${SANDBOX_TOKEN_SCOPES.join(', ')}${bad.length ? ` (got ${bad.join(', ')})` : ' (at least one)'}`);
      const made = await (await Sandbox.connect(sandboxId)).createToken({
        scopes: scopes as SandboxTokenScope[],
        ...(opts.ttl ? { ttlSeconds: durationSeconds(opts.ttl, '--ttl') } : {}),
      });
      if (opts.json) {
        printJson(made);
        return;
      }
      process.stderr.write(`token ${safe(made.id)} for sandbox ${safe(made.sandboxId)}, scopes ${made.scopes.join(' ')}, until ${made.expiresAt}\n`);
      process.stdout.write(`${safe(made.token)}\n`);
    });

  token
    .command('ls')
    .description("a sandbox's tokens (never their secrets)")
    .argument('<sandbox>')
    .option('--json', 'print JSON')
    .action(async (sandboxId: string, opts: { json?: boolean }) => {
      const list = await (await Sandbox.connect(sandboxId)).tokens();
      if (opts.json) {
        printJson(list);
        return;
      }
      process.stdout.write(table([['ID', 'STATE', 'SCOPES', 'EXPIRES'], ...list.map((t) => [t.id, t.state, t.scopes.join(','), t.expiresAt])]));
    });

  token
    .command('revoke')
    .description('make tokens of the sandbox stop working')
    .argument('<sandbox>')
    .argument('<tokens...>')
    .action(async (sandboxId: string, ids: string[]) => {
      const sbx = await Sandbox.connect(sandboxId);
      for (const id of ids) process.stdout.write(`${safe((await sbx.revokeToken(id)).id)}\n`);
    });
}
