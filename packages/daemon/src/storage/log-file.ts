/**
 * The daemon's structured log on disk, one JSON object per line, beside whatever stdout goes
 * to. It is what `GET /v1/logs` (and `warren logs --request ID`) reads: a 5xx body names a
 * request id and nothing internal, and the operator finds the details here under that id
 * without needing access to the daemon's stdout. Bounded by size: when the file would grow
 * past `maxBytes` it becomes `<file>.1` (replacing the previous one) and a new file starts.
 */
import { closeSync, createReadStream, existsSync, fstatSync, openSync, renameSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { LOG_LEVELS, type LogEntry, type LogLevel } from '@warren/protocol';

const DEFAULT_LOG_FILE_BYTES = 32 * 1024 * 1024;

export interface LogSearch {
  requestId?: string;
  /** The lowest level to include. */
  level?: LogLevel;
  /** Only entries at or after this time (ms since the epoch). */
  since?: number;
  limit: number;
}

/** pino's numbers for its level names: trace 10, debug 20, … fatal 60. */
export function levelNumber(level: LogLevel): number {
  return (LOG_LEVELS.indexOf(level) + 1) * 10;
}

export class LogFile {
  private fd: number;
  private size: number;
  private closed = false;

  constructor(
    readonly file: string,
    private readonly maxBytes = DEFAULT_LOG_FILE_BYTES,
  ) {
    this.fd = openSync(file, 'a', 0o600);
    this.size = fstatSync(this.fd).size;
  }

  /** A pino destination: each call is one or more whole lines. */
  write(chunk: string): void {
    // Shutdown closes the file before the process exits; a late line still reaches stdout.
    if (this.closed) return;
    const bytes = Buffer.from(chunk);
    if (this.size > 0 && this.size + bytes.length > this.maxBytes) this.rotate();
    // Synchronous, as pino's default stdout destination is: a line logged just before a
    // crash is on disk, and the log volume (a line per failure or lifecycle event) is small.
    writeSync(this.fd, bytes);
    this.size += bytes.length;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }

  private rotate(): void {
    closeSync(this.fd);
    renameSync(this.file, `${this.file}.1`);
    this.fd = openSync(this.file, 'a', 0o600);
    this.size = 0;
  }

  /** The newest `limit` entries that match, oldest first, and whether older matches were left out. */
  async search(query: LogSearch): Promise<{ entries: LogEntry[]; truncated: boolean }> {
    const minLevel = query.level ? levelNumber(query.level) : 0;
    const entries: LogEntry[] = [];
    let matched = 0;
    for (const file of [`${this.file}.1`, this.file]) {
      if (!existsSync(file)) continue;
      const lines = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Number.POSITIVE_INFINITY });
      for await (const line of lines) {
        // Cheap test first: most lines do not mention the request at all.
        if (query.requestId && !line.includes(query.requestId)) continue;
        const entry = parseEntry(line);
        if (!entry) continue;
        if (query.requestId && entry.requestId !== query.requestId) continue;
        if (entry.level < minLevel || (query.since !== undefined && entry.time < query.since)) continue;
        matched++;
        entries.push(entry);
        // Trimmed in batches: shifting one at a time would be quadratic in the limit.
        if (entries.length >= 2 * query.limit) entries.splice(0, entries.length - query.limit);
      }
    }
    const newest = entries.slice(-query.limit);
    return { entries: newest, truncated: matched > newest.length };
  }
}

/** A line pino wrote, or undefined for anything else (a torn last line after a crash). */
function parseEntry(line: string): LogEntry | undefined {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const entry = value as Partial<LogEntry>;
  return typeof entry.time === 'number' && typeof entry.level === 'number' && typeof entry.msg === 'string' ? (entry as LogEntry) : undefined;
}
