/**
 * Warm pools: per template, a number of booted, idle sandboxes kept ready so that a create
 * only has to claim one and bind the request to it (core/sandboxes.ts). Members are not in
 * the registry until claimed, so after a daemon crash recovery destroys them as strays.
 *
 * Members hold real memory, so they yield first: while the host's available memory is under
 * `minFreeMB`, refills stop and members are destroyed one at a time before any claimed
 * sandbox is hurt.
 */
import { readFileSync, writeFileSync, renameSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { MAX_POOL_SIZE, WarrenError, type PoolInfo } from '@warren/protocol';
import type { TemplateCatalog, TemplateInfo } from '../templates/catalog.js';
import { percentile } from './stats.js';

const REFILL_INTERVAL_MS = 1_000;
const REFILL_DELAY_AFTER_CLAIM_MS = 500;
/** Claim latencies kept per template for the percentiles. */
const CLAIM_SAMPLES = 1_000;

/** A booted sandbox that nobody owns yet. */
export interface PoolMember {
  id: string;
  template: string;
  version: string;
  /** False once its channel closed (it died while waiting). */
  alive(): boolean;
}

/** What the pool needs from the sandbox service. */
export interface PoolHost {
  boot(template: TemplateInfo): Promise<PoolMember>;
  discard(member: PoolMember, reason: string): Promise<void>;
}

/** A pool's live state: the counters it reports, its members and its claim latencies. */
interface TemplatePool extends Omit<PoolInfo, 'template' | 'ready' | 'claimMs'> {
  ready: PoolMember[];
  claimMs: number[];
  /** Its size was set (warren pool, or pools.json): it no longer follows `defaults`. */
  set: boolean;
}

export interface PoolOptions {
  catalog: TemplateCatalog;
  /** JSON file with the configured sizes, so they survive restarts. */
  stateFile: string;
  /** Keep at least this much host memory available; members are reclaimed below it. */
  minFreeMB: number;
  log: Logger;
  /** Where to read MemAvailable; tests of the pressure path point this elsewhere. */
  meminfoPath?: string;
  /** Sizes of templates whose pool nobody set (the default template's: core/default-pool.ts). */
  defaults?: Record<string, number>;
  /**
   * Queues the template's bake if it has none and says whether one is still running. The
   * pool waits for it: members restored from the image come sooner and cheaper than cold
   * boots that compete with the bake for the same two cores.
   */
  bakeFirst?(template: TemplateInfo): boolean;
}

export class WarmPool {
  private pools = new Map<string, TemplatePool>();
  private host?: PoolHost;
  private timer?: NodeJS.Timeout;
  private ticking = false;
  /** The refill running now: stop() waits for it, so a member booting at shutdown is not left behind. */
  private running: Promise<void> = Promise.resolve();
  private stopped = false;
  /** No boot starts before this time (just after a claim). */
  private quietUntil = 0;

  constructor(private opts: PoolOptions) {
    for (const [name, size] of Object.entries(this.loadSizes())) Object.assign(this.pool(name), { size, set: true });
  }

  start(host: PoolHost): void {
    this.host = host;
    this.timer = setInterval(() => void this.tick(), REFILL_INTERVAL_MS);
    this.timer.unref();
    void this.tick();
  }

  /** Stops refilling and destroys every member (daemon shutdown). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running; // a boot in flight discards its member itself once it sees `stopped`
    const members = [...this.pools.values()].flatMap((p) => p.ready.splice(0));
    await this.discardAll(members, 'daemon shutting down');
  }

  setSize(template: string, size: number): PoolInfo {
    if (!Number.isInteger(size) || size < 0 || size > MAX_POOL_SIZE) {
      throw new WarrenError('invalid_argument', `size must be an integer from 0 to ${MAX_POOL_SIZE} (0 disables the pool; got ${size})`);
    }
    this.opts.catalog.resolve(template);
    Object.assign(this.pool(template), { size, set: true });
    this.saveSizes();
    void this.tick();
    return this.info(template);
  }

  /** A ready member of the template's current version, or undefined (a miss). */
  claim(template: TemplateInfo): PoolMember | undefined {
    const p = this.pools.get(template.name);
    if (!p || p.size === 0) return undefined;
    while (p.ready.length > 0) {
      const m = p.ready.shift()!;
      if (m.version === template.version && m.alive()) {
        p.hits++;
        this.refillSoon();
        return m;
      }
      void this.host?.discard(m, m.alive() ? 'template version changed' : 'died while pooled');
    }
    p.misses++;
    this.refillSoon();
    return undefined;
  }

  /**
   * The refill waits a moment: starting a boot spawns runsc from the daemon's event loop and
   * keeps both cores busy, which would slow down the create that just claimed a member and
   * its first commands, the latency the pool exists to cut.
   */
  private refillSoon(): void {
    this.quietUntil = Date.now() + REFILL_DELAY_AFTER_CLAIM_MS;
    setTimeout(() => void this.tick(), REFILL_DELAY_AFTER_CLAIM_MS).unref();
  }

  /** Records how long a successful claim took until the sandbox was bound and ready. */
  recordClaim(template: string, ms: number): void {
    const samples = this.pool(template).claimMs;
    samples.push(ms);
    if (samples.length > CLAIM_SAMPLES) samples.shift();
  }

  info(template: string): PoolInfo {
    this.opts.catalog.resolve(template);
    const p = this.pool(template);
    const sorted = [...p.claimMs].sort((a, b) => a - b);
    return {
      template,
      size: p.size,
      ready: p.ready.length,
      booting: p.booting,
      hits: p.hits,
      misses: p.misses,
      reclaimed: p.reclaimed,
      bootFailures: p.bootFailures,
      ...(p.lastError ? { lastError: p.lastError } : {}),
      claimMs: sorted.length ? { p50: percentile(sorted, 50), p95: percentile(sorted, 95), p99: percentile(sorted, 99), count: sorted.length } : null,
    };
  }

  all(): PoolInfo[] {
    return [...this.pools.keys()].filter((name) => this.opts.catalog.find(name)).map((name) => this.info(name));
  }

  /** Destroys a template's members (the template is being removed). */
  async drop(template: string): Promise<void> {
    const p = this.pools.get(template);
    if (!p) return;
    this.pools.delete(template);
    this.saveSizes();
    await this.discardAll(p.ready.splice(0), 'template removed');
  }

  /** Members boot through the host: without one there is nothing to discard. */
  private async discardAll(members: PoolMember[], why: string): Promise<void> {
    const host = this.host;
    if (host) await Promise.all(members.map((m) => host.discard(m, why)));
  }

  private pool(name: string): TemplatePool {
    let p = this.pools.get(name);
    if (!p) {
      p = { size: this.opts.defaults?.[name] ?? 0, set: false, ready: [], booting: 0, hits: 0, misses: 0, reclaimed: 0, bootFailures: 0, claimMs: [] };
      this.pools.set(name, p);
    }
    return p;
  }

  private tick(): Promise<void> {
    if (this.ticking || this.stopped || !this.host) return Promise.resolve();
    this.ticking = true;
    this.running = this.refill(this.host);
    return this.running;
  }

  private async refill(host: PoolHost): Promise<void> {
    try {
      // A default pool exists without anyone asking for it, also after its template was
      // removed and built again.
      for (const name of Object.keys(this.opts.defaults ?? {})) this.pool(name);
      if (await this.underPressure()) {
        await this.reclaimOne();
        return;
      }
      for (const [name, p] of this.pools) {
        const template = this.opts.catalog.find(name);
        if (!template) continue;
        // A member whose sandbox died while waiting (its channel closed) is replaced now,
        // not found out by the create that would have claimed it.
        for (const dead of p.ready.filter((m) => !m.alive())) {
          p.ready.splice(p.ready.indexOf(dead), 1);
          void host.discard(dead, 'died while pooled');
        }
        // Shrinking: surplus members go, oldest first.
        while (p.ready.length + p.booting > p.size && p.ready.length > 0) void host.discard(p.ready.shift()!, 'pool shrunk');
        // One boot at a time: on a 2-core host parallel boots only slow each other and
        // the claimed sandboxes down.
        if (p.ready.length + p.booting < p.size && Date.now() >= this.quietUntil) {
          if (this.opts.bakeFirst?.(template)) continue;
          await this.boot(name, p, template);
          return;
        }
      }
    } finally {
      this.ticking = false;
    }
  }

  private async boot(name: string, p: TemplatePool, template: TemplateInfo): Promise<void> {
    p.booting++;
    try {
      const member = await this.host!.boot(template);
      if (this.stopped || p.size === 0 || this.pools.get(name) !== p) await this.host!.discard(member, 'pool shrunk while booting');
      else p.ready.push(member);
      delete p.lastError;
    } catch (err) {
      p.bootFailures++;
      p.lastError = (err as Error).message;
      this.opts.log.error({ template: name, err: p.lastError }, 'warm pool: boot failed');
    } finally {
      p.booting--;
    }
  }

  private async underPressure(): Promise<boolean> {
    const meminfo = await readFile(this.opts.meminfoPath ?? '/proc/meminfo', 'utf8');
    const kb = Number(/MemAvailable:\s+(\d+)/.exec(meminfo)?.[1] ?? Infinity);
    return kb / 1024 < this.opts.minFreeMB;
  }

  private async reclaimOne(): Promise<void> {
    const victim = [...this.pools.values()].filter((p) => p.ready.length > 0).sort((a, b) => b.ready.length - a.ready.length)[0];
    if (!victim) return;
    victim.reclaimed++;
    this.opts.log.warn({ minFreeMB: this.opts.minFreeMB }, 'warm pool: host memory low, reclaiming a pooled sandbox');
    await this.host!.discard(victim.ready.pop()!, 'reclaimed under memory pressure');
  }

  private loadSizes(): Record<string, number> {
    try {
      return JSON.parse(readFileSync(this.opts.stateFile, 'utf8')) as Record<string, number>;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
      throw new WarrenError('internal', 'cannot read the warm pool sizes', { cause: err });
    }
  }

  private saveSizes(): void {
    // A size set to 0 is kept where a default would otherwise fill the pool again.
    const sizes = Object.fromEntries(
      [...this.pools].filter(([name, p]) => p.set && (p.size > 0 || this.opts.defaults?.[name] !== undefined)).map(([name, p]) => [name, p.size]),
    );
    const tmp = `${this.opts.stateFile}.tmp`;
    writeFileSync(tmp, JSON.stringify(sizes, null, 1), { mode: 0o600 });
    renameSync(tmp, this.opts.stateFile);
  }
}
