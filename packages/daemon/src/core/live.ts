/**
 * What the dashboard's live stream shows (docs/dashboard.md, "Live updates"): the sandbox
 * list with each running sandbox's CPU and memory now. One sampler serves every open
 * stream, and it runs only while one is open. Records are read again only when one changed
 * (the registry's generation), and a record's JSON is made once: an idle tick is a read of
 * two cgroup files per running sandbox and a comparison of strings per stream.
 */
import type { LiveSandbox, SandboxInfo } from '@warren/protocol';
import type { SandboxDriver } from '../drivers/driver.js';
import type { SandboxService } from './sandboxes.js';

/** How often the list is read and streams are told what changed. */
const LIVE_TICK_MS = 2_000;
/** Disk use is a walk of the Sentry's open files: sampled every this many ticks. */
const DISK_EVERY_TICKS = 15;
/** Most sandboxes one list holds. */
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
  /** Records per scope as last read, and the registry generation they were read at. */
  private readonly records = new Map<string, { generation: number; rows: SandboxInfo[] }>();
  /** Lists of this tick, per scope, so that streams of one key share them. */
  private lists = new Map<string, { rows: LiveSandbox[]; json: Map<string, string> }>();
  /** The JSON of rows without usage, by record: a record that did not change is not serialized again. */
  private jsonOf = new WeakMap<SandboxInfo, string>();

  constructor(
    private readonly sandboxes: SandboxService,
    private readonly driver: SandboxDriver,
    /** Changes whenever a sandbox record does (Registry.generation). */
    private readonly generation: () => number,
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
      this.records.clear();
      this.ticks = 0;
    };
  }

  /** The scope's sandboxes with their usage, and each row's JSON (streams compare those to find changes). */
  list(scope: ListScope): { rows: LiveSandbox[]; json: Map<string, string> } {
    const key = scope.admin ? '' : scope.apiKeyId;
    const cached = this.lists.get(key);
    if (cached) return cached;
    const rows = this.recordsOf(scope, key).map((s) => this.withUsage(s));
    const json = new Map<string, string>();
    for (const r of rows) {
      let text = this.jsonOf.get(r);
      if (text === undefined) {
        text = JSON.stringify(r);
        // Rows with usage are new objects each tick; only bare records are worth remembering.
        if (!('memoryBytes' in r)) this.jsonOf.set(r, text);
      }
      json.set(r.id, text);
    }
    const list = { rows, json };
    this.lists.set(key, list);
    return list;
  }

  /** The scope's records, read again only when some record changed since the last read. */
  private recordsOf(scope: ListScope, key: string): SandboxInfo[] {
    const generation = this.generation();
    const known = this.records.get(key);
    if (known && known.generation === generation) return known.rows;
    const rows: SandboxInfo[] = [];
    let cursor: string | undefined;
    do {
      const page = this.sandboxes.list({ limit: 1000, ...(cursor ? { cursor } : {}), ...(scope.admin ? {} : { apiKeyId: scope.apiKeyId }) });
      rows.push(...page.sandboxes);
      cursor = page.nextCursor;
    } while (cursor && rows.length < MAX_ROWS);
    this.records.set(key, { generation, rows });
    return rows;
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
    const running = this.recordsOf({ admin: true }, '').filter((s) => s.state === 'running');
    const seen = new Set<string>();
    for (const s of running) {
      seen.add(s.id);
      const now = await this.driver.usageNow(s.id);
      if (!now) continue;
      const at = Date.now();
      const before = this.usage.get(s.id);
      const cpu = before && at > before.at ? (now.cpuNanos - before.cpuNanos) / 1e6 / (at - before.at) : undefined;
      // Also at a sandbox's first sample: one just resumed or created shows its disk at once.
      const diskBytes = withDisk || before?.diskBytes === undefined ? await this.driver.diskUsage(s.id) : before.diskBytes;
      this.usage.set(s.id, {
        cpuNanos: now.cpuNanos,
        at,
        ...(cpu !== undefined && cpu >= 0 ? { cpu } : {}),
        memoryBytes: now.memoryBytes,
        ...(diskBytes !== undefined ? { diskBytes } : {}),
      });
    }
    for (const id of this.usage.keys()) if (!seen.has(id)) this.usage.delete(id);
    this.lists.clear();
    for (const listener of this.listeners) listener();
  }
}
