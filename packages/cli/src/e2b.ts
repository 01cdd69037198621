/** `warren e2b`: point E2B's official SDKs at this daemon (docs/e2b.md). */
import type { Command } from 'commander';
import { HttpClient, resolveApiKey } from '@warren/sdk';

/** A value quoted for POSIX shells: single quotes, with each ' written as '\''. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** The `export` lines that make E2B's SDKs talk to the daemon at `url` with `key`. */
export function e2bEnvLines(url: string, key: string, caFile?: string): string {
  const base = url.replace(/\/+$/, '');
  const lines = [
    `export E2B_API_URL=${shellQuote(`${base}/e2b`)}`,
    `export E2B_SANDBOX_URL=${shellQuote(`${base}/e2b/envd`)}`,
    `export E2B_API_KEY=${shellQuote(key)}`,
    // warren's keys are not in E2B's `e2b_<hex>` format, which the SDKs check by default.
    'export E2B_VALIDATE_API_KEY=false',
  ];
  // The SDKs trust the system's CAs only: a daemon with its own certificate needs it added.
  if (base.startsWith('https:') && caFile) lines.push(`export NODE_EXTRA_CA_CERTS=${shellQuote(caFile)}`, `export SSL_CERT_FILE=${shellQuote(caFile)}`);
  return `${lines.join('\n')}\n`;
}

export function registerE2bCommands(program: Command): void {
  const e2b = program.command('e2b').description("E2B's API, served by the daemon: run E2B's official SDKs against warren");
  e2b
    .command('env')
    .description('print the export lines that point E2B\'s SDKs at this daemon: eval "$(warren e2b env)"')
    .option('--key <key>', 'the API key the SDKs should use (default: $WARREN_API_KEY, else the admin key file)')
    .action((opts: { key?: string }) => {
      const key = resolveApiKey(opts.key);
      if (!key) throw new Error('no API key: pass --key, set WARREN_API_KEY, or run as a user who can read the admin key file');
      process.stdout.write(e2bEnvLines(new HttpClient().url, key, process.env.WARREN_CA_FILE));
    });
}
