/**
 * The heartbeat: every 5 s each live sandbox and pool member is checked. What can be read on
 * the host is read every time: the disk limit (the filestore's size), the daemon's own calls
 * and tunnels (activity). The agent is pinged only when the ping schedule says so
 * (ping-schedule.ts): every 5 s while something goes on, backing off to once a minute when
 * the sandbox is quiet, since each ping wakes the sandbox. One that stops answering (or ran
 * out of memory) is declared dead with the reason; one that wrote past its disk limit too;
 * one idle for its idleSeconds is hibernated once a ping confirms no command runs.
 */
import type { SandboxRecord } from '../registry.js';
import type { Live, SandboxContext, SandboxServiceOptions } from './context.js';
import type { SerialOperations } from './operations.js';
import { answered, newSchedule, PING_MIN_MS, pingDue, pinged, type PingSchedule } from './ping-schedule.js';
import type { Teardown } from './teardown.js';

const HEARTBEAT_INTERVAL_MS = PING_MIN_MS;
const HEARTBEAT_TIMEOUT_MS = 10_000;
/** Consecutive missed heartbeats before a sandbox without an OOM record is declared hung. */
const HEARTBEAT_MISSES_ALLOWED = 3;

export class Heartbeat {
  private readonly opts: SandboxServiceOptions;
  private timer?: NodeJS.Timeout;
  /** Ping bookkeeping per channel; a pool member keeps its own when it is claimed. */
  private schedules = new WeakMap<Live, PingSchedule>();

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
    const schedule = this.scheduleOf(live);
    if (!pingDue(schedule, Date.now(), { missed: live.missed, confirmIdle: false })) return;
    live.checking = true;
    try {
      pinged(schedule, Date.now());
      await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
      answered(schedule, false);
    } catch {
      if (++live.missed >= HEARTBEAT_MISSES_ALLOWED) live.client.close('stopped answering while pooled');
    } finally {
      live.checking = false;
    }
  }

  private scheduleOf(live: Live): PingSchedule {
    let schedule = this.schedules.get(live);
    if (!schedule) {
      schedule = newSchedule(Date.now());
      this.schedules.set(live, schedule);
    }
    return schedule;
  }

  private async check(id: string, live: Live): Promise<void> {
    // A sandbox being saved has its channel quiesced: a ping would wait for the checkpoint.
    if (live.checking || live.client.closed || this.ops.busy(id)) return;
    live.checking = true;
    let idle = false;
    try {
      // A running call or an open tunnel is activity; the daemon knows without asking.
      if (live.client.busy > 0 || live.client.openTunnels > 0) this.ctx.lastActive.set(id, Date.now());
      const record = this.opts.registry.get(id);
      if (await this.enforceDisk(id, record)) return;
      const schedule = this.scheduleOf(live);
      const needs = { missed: live.missed, lastActive: this.ctx.lastActive.get(id), confirmIdle: this.idleTooLong(id, record) };
      if (!pingDue(schedule, Date.now(), needs)) return;
      pinged(schedule, Date.now());
      const { busy } = await live.client.request('ping', {}, HEARTBEAT_TIMEOUT_MS);
      live.missed = 0;
      // A running command or an open call is activity; the ping itself was the only call.
      const active = busy > 0 || live.client.busy > 0 || live.client.openTunnels > 0;
      if (active) this.ctx.lastActive.set(id, Date.now());
      answered(schedule, active);
      idle = !active && this.idleTooLong(id, this.opts.registry.get(id));
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
  private idleTooLong(id: string, r: SandboxRecord | undefined): boolean {
    if (r?.state !== 'running' || !r.idleSeconds) return false;
    const last = this.ctx.lastActive.get(id) ?? Date.now();
    return Date.now() - last >= r.idleSeconds * 1000;
  }

  /**
   * gVisor's overlay has no size limit and this kernel has no filesystem quotas, so diskMB
   * is enforced from outside: a sandbox whose writes exceed it is stopped, with that reason.
   * (Uploads through the API are refused up front instead; see api/routes/files.ts.) Read on
   * the host every tick: it costs the sandbox nothing. True: the sandbox was stopped.
   */
  private async enforceDisk(id: string, r: SandboxRecord | undefined): Promise<boolean> {
    if (r?.state !== 'running') return false;
    const used = await this.opts.driver.diskUsage(id);
    if (used <= r.resources.diskMB * 1024 * 1024) return false;
    await this.ending.markDead(id, `the sandbox was stopped: disk limit exceeded (it wrote ${Math.round(used / 1048576)} MB, limit ${r.resources.diskMB} MB)`);
    return true;
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
