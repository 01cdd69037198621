/** `warren usage`: what sandboxes cost in a window, per sandbox, per API key and in total. */
import type { Command } from 'commander';
import { getUsage, type UsageReport, type UsageTotals } from '@warren/sdk';
import { printJson, safe, table } from './output.js';

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** `30s`, `10m`, `12h`, `7d` in seconds (the units `warren usage --since` takes). */
export function durationSeconds(text: string, flag: string): number {
  const [, amount, unit] = /^(\d+)([smhdw])$/.exec(text) ?? [];
  const unitMs = unit && UNIT_MS[unit];
  if (!amount || !unitMs) throw new Error(`${flag} takes a duration such as 30m, 12h or 7d (got '${text}')`);
  return (Number(amount) * unitMs) / 1000;
}

/** WHEN: an ISO 8601 date or time, or a duration back from now (`30m`, `2h`, `7d`). */
export function parseWhen(option: string, now = Date.now()) {
  return (value: string): Date => {
    const [, amount, unit] = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(value.trim()) ?? [];
    const unitMs = unit && UNIT_MS[unit];
    if (amount && unitMs) return new Date(now - Number(amount) * unitMs);
    const at = Date.parse(value);
    if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(at)) {
      throw new Error(
        `${option} must be an ISO 8601 date or time (2024-05-01, 2024-05-01T12:00:00Z) or a duration back from now (30m, 2h, 7d), got '${value}'`,
      );
    }
    return new Date(at);
  };
}

export function duration(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const s = Math.round(seconds);
  const [d, h, m, sec] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60), s % 60];
  const two = (n: number) => String(n).padStart(2, '0');
  if (d) return `${d}d${two(h)}h${two(m)}m`;
  if (h) return `${h}h${two(m)}m${two(sec)}s`;
  return `${m}m${two(sec)}s`;
}

const money = (usd: number) => `$${usd.toFixed(6)}`;
const amounts = (t: UsageTotals) => [duration(t.activeSeconds), t.vcpuSeconds.toFixed(1), t.gibSeconds.toFixed(1), money(t.cost)];
const when = (iso: string) => safe(iso.replace('T', ' ').slice(0, 19));

export function usageText(r: UsageReport): string {
  const out = [`usage from ${when(r.since)} to ${when(r.until)} UTC`];
  if (!r.sandboxes.length) out.push('no sandbox ran in this window');
  else {
    const sandboxRows = [['SANDBOX', 'TEMPLATE', 'ACTIVE', 'VCPU-S', 'GIB-S', 'COST', 'RUNNING']];
    for (const s of r.sandboxes) sandboxRows.push([s.sandboxId, s.template, ...amounts(s), s.active ? 'yes' : '']);
    const keyRows = [['API KEY', 'SANDBOXES', 'ACTIVE', 'VCPU-S', 'GIB-S', 'COST']];
    for (const k of r.apiKeys) keyRows.push([k.apiKeyId, String(k.sandboxes), ...amounts(k)]);
    out.push('', table(sandboxRows).trimEnd(), '', table(keyRows).trimEnd(), '');
    const t = r.total;
    out.push(
      `total: ${t.sandboxes} sandbox${t.sandboxes === 1 ? '' : 'es'}, ${duration(t.activeSeconds)} active, ${t.vcpuSeconds.toFixed(1)} vCPU-s, ${t.gibSeconds.toFixed(1)} GiB-s, ${money(t.cost)}`,
    );
  }
  out.push(`prices: $${r.prices.vcpuHour} per vCPU-hour, $${r.prices.gibHour} per GiB-hour (allocated resources while running; hibernated time is free)`);
  return `${out.join('\n')}\n`;
}

export function registerUsageCommands(program: Command): void {
  program
    .command('usage')
    .description('usage and cost of sandboxes in a window: per sandbox, per API key and in total')
    .option('--since <when>', 'start: ISO 8601 date or time, or a duration back from now like 30m, 2h, 7d (default 24h before --until)', parseWhen('--since'))
    .option('--until <when>', 'end, in the same forms (default now)', parseWhen('--until'))
    .option('--api-key <id>', 'only sandboxes created with this API key id')
    .option('--json', 'print JSON')
    .action(async (opts: { since?: Date; until?: Date; apiKey?: string; json?: boolean }) => {
      const report = await getUsage({ since: opts.since, until: opts.until, apiKey: opts.apiKey });
      if (opts.json) printJson(report);
      else process.stdout.write(usageText(report));
    });
}
