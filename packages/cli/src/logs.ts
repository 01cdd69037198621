/** `warren logs`: the daemon's structured log, e.g. the details behind a 5xx error's request id. */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { getDaemonLogs, LOG_LEVELS, type LogEntry, type LogLevel } from '@warren/sdk';
import { printJson, safe } from './output.js';
import { parseWhen } from './usage.js';

/** Fields every line has, shown in the line's head rather than among its fields. */
const HEAD_FIELDS = new Set(['time', 'level', 'msg', 'name', 'pid', 'hostname']);
const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };

/**
 * One entry as `TIME LEVEL message key=value ...`; a multi-line value (a stack) follows on
 * indented lines. Everything is escaped: log lines quote what sandboxes and callers sent.
 */
export function logLine(entry: LogEntry): string {
  const head = `${new Date(entry.time).toISOString()} ${LEVEL_NAMES[entry.level] ?? String(entry.level)} ${safe(entry.msg)}`;
  const fields: string[] = [];
  const blocks: string[] = [];
  for (const [key, value] of Object.entries(entry)) {
    if (HEAD_FIELDS.has(key) || value === undefined) continue;
    if (typeof value === 'string' && value.includes('\n')) {
      blocks.push(`  ${safe(key)}:`, ...value.split('\n').map((l) => `    ${safe(l, { keepTabs: true })}`));
    } else {
      fields.push(`${safe(key)}=${safe(typeof value === 'string' ? value : JSON.stringify(value))}`);
    }
  }
  return [[head, ...fields].join(' '), ...blocks].join('\n');
}

function level(value: string): LogLevel {
  if (!(LOG_LEVELS as readonly string[]).includes(value)) throw new InvalidArgumentError(`--level must be one of ${LOG_LEVELS.join(', ')}`);
  return value as LogLevel;
}

export function registerLogCommands(program: Command): void {
  program
    .command('logs')
    .description("the daemon's log: find the details of a failed request by the id its error names (admin key)")
    .option('--request <id>', 'only the lines of this request id (from an error message or the X-Request-Id header)')
    .addOption(new Option('--level <level>', `lowest level to show: ${LOG_LEVELS.join(', ')}`).argParser(level))
    .option('--since <when>', 'ISO 8601 date or time, or a duration back from now like 30m, 2h, 7d', parseWhen('--since'))
    .addOption(
      new Option('--limit <n>', 'the newest this many lines (default 200, at most 10000)').argParser((v) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new InvalidArgumentError('--limit must be a whole number from 1 to 10000');
        return n;
      }),
    )
    .option('--json', 'print the response as JSON')
    .action(async (opts: { request?: string; level?: LogLevel; since?: Date; limit?: number; json?: boolean }) => {
      const res = await getDaemonLogs({ requestId: opts.request, level: opts.level, since: opts.since, limit: opts.limit });
      if (opts.json) return printJson(res);
      if (res.truncated) process.stderr.write(`showing the newest ${res.entries.length} matching lines; use --limit or --since for others\n`);
      if (!res.entries.length) {
        process.stderr.write(opts.request ? `no log lines for request ${safe(opts.request)}\n` : 'no log lines match\n');
        process.exitCode = 1;
        return;
      }
      for (const e of res.entries) process.stdout.write(`${logLine(e)}\n`);
    });
}
