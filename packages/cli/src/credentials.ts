/**
 * `--credential` flags of `warren create` and `warren net`: `HOST=Header: value`, where the
 * value may be `@env:NAME` (read from this shell's environment) or `@file:PATH` (read from a
 * file, trailing newline dropped), so the secret need not appear in shell history or `ps`.
 * Several flags for one host become one credential with several headers. The daemon
 * validates the rest (docs/network.md).
 */
import { readFileSync } from 'node:fs';
import type { CredentialRule } from '@warren/sdk';

export const CREDENTIAL_HELP =
  'HOST=Header: value — the daemon adds the header to requests to HOST (which --allow must allow); the value may be @env:NAME or @file:PATH; repeatable';

export function parseCredentialFlags(flags: string[]): CredentialRule[] {
  const byHost = new Map<string, Record<string, string>>();
  for (const flag of flags) {
    const eq = flag.indexOf('=');
    const colon = flag.indexOf(':', eq + 1);
    if (eq <= 0 || colon < 0) throw new Error(`--credential '${flag.slice(0, 40)}': expected HOST=Header: value`);
    const host = flag.slice(0, eq).trim();
    const name = flag.slice(eq + 1, colon).trim();
    const value = resolveValue(flag.slice(colon + 1).trim(), `${host} ${name}`);
    const headers = byHost.get(host) ?? {};
    headers[name] = value;
    byHost.set(host, headers);
  }
  return [...byHost].map(([host, headers]) => ({ host, headers }));
}

function resolveValue(text: string, what: string): string {
  if (text.startsWith('@env:')) {
    const name = text.slice(5);
    const value = process.env[name];
    if (value === undefined) throw new Error(`--credential ${what}: environment variable ${name} is not set`);
    return value;
  }
  if (text.startsWith('@file:')) {
    const file = text.slice(6);
    try {
      return readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new Error(`--credential ${what}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  return text;
}
