/**
 * Metering: the intervals during which each sandbox ran, with the resources it had
 * allocated, stored in the daemon's SQLite database so that usage survives kills and daemon
 * restarts. The sandbox service opens an interval when a sandbox starts running (create,
 * resume, fork) and closes it when it stops (hibernate, kill, death); hibernated time has no
 * interval and so costs nothing. Reports clip intervals to a window and price them.
 */
import type Database from 'better-sqlite3';
import type { Logger } from 'pino';
import type { ApiKeyUsage, ResolvedResources, SandboxUsage, UsageReport, UsageTotals } from '@warren/protocol';
import type { ActivityMeter } from './sandboxes.js';

export interface UsagePricing {
  /** USD per allocated vCPU per hour of running. */
  priceVcpuHour: number;
  /** USD per allocated GiB of memory per hour of running. */
  priceGibHour: number;
}

export interface UsageMeterOptions extends UsagePricing {
  /** The template a sandbox was created from, recorded with its intervals (they outlive it). */
  templateOf?: (sandboxId: string) => string | undefined;
  log?: Logger;
}

export interface UsageWindow {
  /** ms epoch, inclusive. */
  since: number;
  /** ms epoch, exclusive; an interval still open counts up to the earlier of this and now. */
  until: number;
  apiKeyId?: string;
}

// Times are ms since the epoch. ended_at is NULL while the sandbox is being billed; at most
// one interval per sandbox is open (start closes the previous one in the same transaction).
const SCHEMA = `
CREATE TABLE IF NOT EXISTS usage_intervals (
  sandbox_id TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  template TEXT,
  started_at INTEGER NOT NULL,
  ended_at INTEGER,
  cpus REAL NOT NULL,
  memory_mb INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_intervals_open ON usage_intervals(sandbox_id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS usage_intervals_started ON usage_intervals(started_at);
`;

interface IntervalRow {
  sandbox_id: string;
  api_key_id: string;
  template: string | null;
  started_at: number;
  ended_at: number | null;
  cpus: number;
  memory_mb: number;
}

const zero = (): UsageTotals => ({ activeSeconds: 0, vcpuSeconds: 0, gibSeconds: 0, cost: 0 });

export class UsageMeter implements ActivityMeter {
  private readonly closeOpen: Database.Statement;
  private readonly open: Database.Statement;
  private readonly startTx: (id: string, apiKeyId: string, resources: ResolvedResources, at: number) => void;

  constructor(
    private readonly db: Database.Database,
    private readonly opts: UsageMeterOptions,
  ) {
    db.exec(SCHEMA);
    // A stop stamped before its start (clocks, racing callers) closes it as empty, never negative.
    this.closeOpen = db.prepare('UPDATE usage_intervals SET ended_at = MAX(started_at, ?) WHERE sandbox_id = ? AND ended_at IS NULL');
    this.open = db.prepare(
      'INSERT INTO usage_intervals (sandbox_id, api_key_id, template, started_at, ended_at, cpus, memory_mb) VALUES (?, ?, ?, ?, NULL, ?, ?)',
    );
    this.startTx = db.transaction((id: string, apiKeyId: string, resources: ResolvedResources, at: number) => {
      // A resize or a repeated start must not bill the same seconds twice.
      this.closeOpen.run(at, id);
      this.open.run(id, apiKeyId, this.opts.templateOf?.(id) ?? null, at, resources.cpus, resources.memoryMB);
    });
  }

  get prices(): UsagePricing {
    return { priceVcpuHour: this.opts.priceVcpuHour, priceGibHour: this.opts.priceGibHour };
  }

  start(id: string, apiKeyId: string, resources: ResolvedResources, at = Date.now()): void {
    this.startTx(id, apiKeyId, resources, at);
  }

  stop(id: string, at = Date.now()): void {
    this.closeOpen.run(at, id);
  }

  /**
   * Closes the open intervals of sandboxes that are not running any more, after a daemon
   * restart: one that died while the daemon was down is billed up to now, as nothing recorded
   * when it died. Returns the ids it closed.
   */
  reconcile(liveIds: Set<string>, at = Date.now()): string[] {
    const open = (this.db.prepare('SELECT DISTINCT sandbox_id FROM usage_intervals WHERE ended_at IS NULL').all() as Array<{ sandbox_id: string }>).map(
      (r) => r.sandbox_id,
    );
    const stale = open.filter((id) => !liveIds.has(id));
    this.db.transaction(() => {
      for (const id of stale) this.closeOpen.run(at, id);
    })();
    if (stale.length)
      this.opts.log?.info({ closed: stale, stillBilled: open.length - stale.length }, 'usage: closed intervals of sandboxes that are no longer running');
    return stale;
  }

  report(window: UsageWindow, now = Date.now()): UsageReport {
    const { since, until } = window;
    const rows = this.db
      .prepare(
        `SELECT * FROM usage_intervals
         WHERE started_at < @until AND (ended_at IS NULL OR ended_at > @since) AND (@apiKeyId IS NULL OR api_key_id = @apiKeyId)
         ORDER BY sandbox_id, started_at`,
      )
      .all({ since, until, apiKeyId: window.apiKeyId ?? null }) as IntervalRow[];

    const perSandbox = new Map<string, SandboxUsage>();
    for (const row of rows) {
      const from = Math.max(row.started_at, since);
      // An open interval is billed up to now: a window reaching into the future must not
      // charge for seconds that have not happened.
      const to = Math.min(row.ended_at ?? Math.min(now, until), until);
      const seconds = Math.max(0, to - from) / 1000;
      let s = perSandbox.get(row.sandbox_id);
      if (!s) {
        const template = row.template ?? this.opts.templateOf?.(row.sandbox_id) ?? 'unknown';
        s = { sandboxId: row.sandbox_id, apiKeyId: row.api_key_id, template, active: false, ...zero() };
        perSandbox.set(row.sandbox_id, s);
      }
      if (row.ended_at === null) s.active = true;
      this.add(s, seconds, row.cpus, row.memory_mb);
    }
    const sandboxes = [...perSandbox.values()].filter((s) => s.activeSeconds > 0 || s.active);

    const perKey = new Map<string, ApiKeyUsage>();
    const total: UsageTotals & { sandboxes: number } = { sandboxes: 0, ...zero() };
    for (const s of sandboxes) {
      let k = perKey.get(s.apiKeyId);
      if (!k) perKey.set(s.apiKeyId, (k = { apiKeyId: s.apiKeyId, sandboxes: 0, ...zero() }));
      for (const into of [k, total]) {
        into.sandboxes += 1;
        sum(into, s);
      }
    }

    const byCost = <T extends UsageTotals>(a: T, b: T) => b.cost - a.cost || b.activeSeconds - a.activeSeconds;
    return {
      since: new Date(since).toISOString(),
      until: new Date(until).toISOString(),
      prices: { currency: 'USD', vcpuHour: this.opts.priceVcpuHour, gibHour: this.opts.priceGibHour },
      sandboxes: sandboxes.sort(byCost).map(rounded),
      apiKeys: [...perKey.values()].sort(byCost).map(rounded),
      total: rounded(total),
    };
  }

  private add(into: UsageTotals, seconds: number, cpus: number, memoryMB: number): void {
    const vcpuSeconds = cpus * seconds;
    const gibSeconds = (memoryMB / 1024) * seconds;
    into.activeSeconds += seconds;
    into.vcpuSeconds += vcpuSeconds;
    into.gibSeconds += gibSeconds;
    into.cost += (vcpuSeconds / 3600) * this.opts.priceVcpuHour + (gibSeconds / 3600) * this.opts.priceGibHour;
  }
}

function sum(into: UsageTotals, from: UsageTotals): void {
  into.activeSeconds += from.activeSeconds;
  into.vcpuSeconds += from.vcpuSeconds;
  into.gibSeconds += from.gibSeconds;
  into.cost += from.cost;
}

/** Rounded for the wire only (sums are taken before): ms for seconds, micro-dollars for cost. */
function rounded<T extends UsageTotals>(t: T): T {
  return { ...t, activeSeconds: round(t.activeSeconds, 3), vcpuSeconds: round(t.vcpuSeconds, 3), gibSeconds: round(t.gibSeconds, 3), cost: round(t.cost, 6) };
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
