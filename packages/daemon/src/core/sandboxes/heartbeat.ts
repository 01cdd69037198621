/**
 * The heartbeat: every few seconds each live sandbox and pool member is pinged. One that
 * stops answering (or ran out of memory, or wrote past its disk limit) is declared dead with
 * the reason; one idle for its idleSeconds is hibernated.
 */
import type { Live, SandboxContext, SandboxServiceOptions } from './context.js';
import type { SerialOperations } from './operations.js';
import type { Teardown } from './teardown.js';

const HEARTBEAT_INTERVAL_MS = 5_000;
const HEARTBEAT_TIMEOUT_MS = 10_000;
/** Consecutive missed heartbeats before a sandbox without an OOM record is declared hung. */
const HEARTBEAT_MISSES_ALLOWED = 3;

export class Heartbeat {
  private readonly opts: SandboxServiceOptions;
  private timer?: NodeJS.Timeout;

  constructor(
    private ctx: SandboxContext,
    private ops: SerialOperations,
    private ending: Teardown,
    /** Auto-hibernation of an idle sandbox (hibernate.ts). */
    private hibernate: (id: string, reason: string) => Promise<unknown>,
  ) {
    this.opts = ctx.opts;
  }

  start(): void {
    this.timer = setInterval(() => void this.checkAll(), HEARTBEAT_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /**
   * Checks every running sandbox once per interval, each at its own fixed point in the
   * interval (from its id) rather than all at once: with 150 sandboxes a tick was 150 pings
   * and disk reads in one burst, and whatever call arrived during it waited behind them
   * (bench density). A fixed point keeps each sandbox's checks one interval apart whatever
   * else starts or stops; a check still pending at its next turn is skipped by check().
   */
  private async checkAll(): Promise<void> {
    await Promise.all([...this.ctx.live.entries()].map(([id, live]) => delay(heartbeatPhase(id)).then(() => this.check(id, live))));
    await Promise.all([...this.ctx.pooled.values()].map((live) => this.checkPooled(live)));
  }

  /**
   * A pooled member that stops answering gets its channel closed, which marks it dead for
   * the pool: it is replaced instead of handed to a create that would wait on it.
   */
  private async checkPooled(live: Live): Promise<void> {
    if (live.checking || live.client.closed) return;
    live.checking = true;
    try {
      await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
    } catch {
      if (++live.missed >= HEARTBEAT_MISSES_ALLOWED) live.client.close('stopped answering while pooled');
    } finally {
      live.checking = false;
    }
  }

  private async check(id: string, live: Live): Promise<void> {
    // A sandbox being saved has its channel quiesced: a ping would wait for the checkpoint.
    if (live.checking || live.client.closed || this.ops.busy(id)) return;
    live.checking = true;
    let idle = false;
    try {
      const { busy } = await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
      // A running command or an open call is activity; the ping itself was the only call.
      if (busy > 0 || live.client.busy > 0 || live.client.openTunnels > 0) this.ctx.lastActive.set(id, Date.now());
      await this.enforceDisk(id);
      idle = this.idleTooLong(id);
    } catch {
      live.missed++;
      const cause = await this.opts.driver.diagnose(id);
      if (cause.oomKilled || live.missed >= HEARTBEAT_MISSES_ALLOWED) {
        await this.ending.markDead(id, await this.ending.explain(id, `sandbox stopped responding for ${(live.missed * HEARTBEAT_TIMEOUT_MS) / 1000}s`));
      }
    } finally {
      live.checking = false;
    }
    if (idle) {
      await this.hibernate(id, 'idle').catch((err: Error) => this.opts.log.warn({ sandbox: id, err: err.message }, 'auto-hibernate failed'));
    }
  }

  /** Whether a running sandbox with idleSeconds set has seen no activity for that long. */
  private idleTooLong(id: string): boolean {
    const r = this.opts.registry.get(id);
    if (r?.state !== 'running' || !r.idleSeconds) return false;
    const last = this.ctx.lastActive.get(id) ?? Date.now();
    return Date.now() - last >= r.idleSeconds * 1000;
  }

  /**
   * gVisor's overlay has no size limit and this kernel has no filesystem quotas, so diskMB
   * is enforced from outside: a sandbox whose writes exceed it is stopped, with that reason.
   * (Uploads through the API are refused up front instead; see api/routes/files.ts.)
   */
  private async enforceDisk(id: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (r?.state !== 'running') return;
    const used = await this.opts.driver.diskUsage(id);
    if (used > r.resources.diskMB * 1024 * 1024) {
      await this.ending.markDead(
        id,
        `the sandbox was stopped: disk limit exceeded (it wrote ${Math.round(used / 1048576)} MB, limit ${r.resources.diskMB} MB)`,
      );
    }
  }
}

/** Where in the heartbeat interval a sandbox is checked: FNV-1a of its id, spread over the interval. */
function heartbeatPhase(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return (h >>> 0) % HEARTBEAT_INTERVAL_MS;
}

/** A timer that does not keep the daemon alive (a shutdown does not wait for a heartbeat). */
function delay(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms).unref());
}
