/**
 * What the dashboard's live stream shows (docs/dashboard.md, "Live updates"): the sandbox
 * list with each running sandbox's CPU and memory now. One sampler serves every open
 * stream, and it runs only while one is open: five idle dashboards cost one query and one
 * pass over the cgroups per tick, not five.
 */
import type { LiveSandbox, SandboxInfo } from '@warren/protocol';
import type { SandboxDriver } from '../drivers/driver.js';
import type { SandboxService } from './sandboxes.js';

/** How often the list is read and streams are told what changed. */
export const LIVE_TICK_MS = 2_000;
/** Disk use is a walk of the Sentry's open files: sampled every this many ticks. */
const DISK_EVERY_TICKS = 15;
/** Most sandboxes one list holds (the dashboard shows the newest this many). */
const MAX_ROWS = 5_000;

interface Usage {
  cpuNanos: number;
  at: number;
  cpu?: number;
  memoryBytes: number;
  diskBytes?: number;
}

/** Who a list is for: an admin key sees every sandbox, another key its own. */
export type ListScope = { admin: true } | { admin: false; apiKeyId: string };

export class LiveFeed {
  private readonly usage = new Map<string, Usage>();
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  private ticks = 0;
  /** Lists of this tick, per scope, so that streams of one key share one query. */
  private lists = new Map<string, { rows: LiveSandbox[]; json: Map<string, string> }>();

  constructor(
    private readonly sandboxes: SandboxService,
    private readonly driver: SandboxDriver,
    private readonly tickMs = LIVE_TICK_MS,
  ) {}

  /** Calls `onTick` after each sample until the returned function is called. */
  subscribe(onTick: () => void): () => void {
    this.listeners.add(onTick);
    if (!this.timer) {
      this.timer = setInterval(() => void this.tick(), this.tickMs);
      this.timer.unref();
    }
    return () => {
      this.listeners.delete(onTick);
      if (this.listeners.size || !this.timer) return;
      clearInterval(this.timer);
      this.timer = undefined;
      this.usage.clear();
    };
  }

  /** The scope's sandboxes with their usage, and each row's JSON (streams compare those to find changes). */
  list(scope: ListScope): { rows: LiveSandbox[]; json: Map<string, string> } {
    const key = scope.admin ? '' : scope.apiKeyId;
    const cached = this.lists.get(key);
    if (cached) return cached;
    const rows: LiveSandbox[] = [];
    let cursor: string | undefined;
    do {
      const page = this.sandboxes.list({ limit: 1000, ...(cursor ? { cursor } : {}), ...(scope.admin ? {} : { apiKeyId: scope.apiKeyId }) });
      for (const s of page.sandboxes) rows.push(this.withUsage(s));
      cursor = page.nextCursor;
    } while (cursor && rows.length < MAX_ROWS);
    const json = new Map(rows.map((r) => [r.id, JSON.stringify(r)]));
    const list = { rows, json };
    this.lists.set(key, list);
    return list;
  }

  private withUsage(s: SandboxInfo): LiveSandbox {
    const u = s.state === 'running' ? this.usage.get(s.id) : undefined;
    if (!u) return s;
    return {
      ...s,
      ...(u.cpu !== undefined ? { cpu: Math.round(u.cpu * 1000) / 1000 } : {}),
      memoryBytes: u.memoryBytes,
      ...(u.diskBytes !== undefined ? { diskBytes: u.diskBytes } : {}),
    };
  }

  private async tick(): Promise<void> {
    this.lists.clear();
    const withDisk = this.ticks++ % DISK_EVERY_TICKS === 0;
    const running = this.list({ admin: true }).rows.filter((s) => s.state === 'running');
    const seen = new Set<string>();
    for (const s of running) {
      seen.add(s.id);
      const now = await this.driver.usageNow(s.id);
      if (!now) continue;
      const at = Date.now();
      const before = this.usage.get(s.id);
      const cpu = before && at > before.at ? (now.cpuNanos - before.cpuNanos) / 1e6 / (at - before.at) : undefined;
      const diskBytes = withDisk ? await this.driver.diskUsage(s.id) : before?.diskBytes;
      this.usage.set(s.id, {
        cpuNanos: now.cpuNanos,
        at,
        ...(cpu !== undefined && cpu >= 0 ? { cpu } : {}),
        memoryBytes: now.memoryBytes,
        ...(diskBytes !== undefined ? { diskBytes } : {}),
      });
    }
    for (const id of this.usage.keys()) if (!seen.has(id)) this.usage.delete(id);
    // The list read before sampling has last tick's numbers: read it again for the streams.
    this.lists.clear();
    for (const listener of this.listeners) listener();
  }
}
