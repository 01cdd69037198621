/** Printing helpers shared by CLI commands. */
import type { SandboxInfo } from '@warren/sdk';

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function table(rows: string[][]): string {
  const widths = (rows[0] ?? []).map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n') + '\n';
}

export function sandboxRows(list: SandboxInfo[]): string {
  const rows = [['ID', 'STATE', 'TEMPLATE', 'CREATED', 'EXPIRES', 'METADATA']];
  for (const s of list) {
    rows.push([
      s.id,
      s.state,
      s.template,
      s.createdAt.replace('T', ' ').slice(0, 19),
      s.expiresAt.replace('T', ' ').slice(0, 19),
      Object.entries(s.metadata)
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
    ]);
  }
  return table(rows);
}

/** An option parser for integers of at least 1; `name` is the option, for the message. */
export function positiveInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got '${v}'`);
    return n;
  };
}

/** Parses repeated k=v options. */
export function keyValues(pairs: string[], what: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq < 1) throw new Error(`${what} must be KEY=VALUE, got '${p}'`);
    out[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return out;
}

export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
