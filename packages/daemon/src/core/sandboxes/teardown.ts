/**
 * How a sandbox ends: killed (or expired, or a create undone) and removed from the
 * registry, or dead on its own with the reason kept on its record.
 */
import { transition } from '../lifecycle.js';
import type { SandboxContext, SandboxServiceOptions } from './context.js';
import type { Channels } from './channels.js';
import type { SandboxEgress } from './egress.js';
import { recordFor } from './records.js';

export class Teardown {
  private readonly opts: SandboxServiceOptions;
  /** Told each sandbox that ends, before its channel is released (TCP forwards close). */
  private readonly hooks: Array<(id: string) => void> = [];

  constructor(
    private ctx: SandboxContext,
    private channels: Channels,
    private egress: SandboxEgress,
  ) {
    this.opts = ctx.opts;
  }

  async kill(id: string, reason = 'killed'): Promise<void> {
    recordFor(this.opts.registry, id, 'kill');
    await this.teardown(id, reason);
    transition(this.opts.registry, id, 'remove');
  }

  onTeardown(hook: (id: string) => void): void {
    this.hooks.push(hook);
  }

  async teardown(id: string, reason: string): Promise<void> {
    for (const hook of this.hooks) hook(id);
    this.opts.meter?.stop(id);
    this.ctx.lastActive.delete(id);
    this.egress.forget(id);
    this.opts.egress?.closeAll(id);
    await this.channels.release(id, reason);
    await this.opts.egressCa?.remove(id);
    await this.opts.images.remove(this.opts.images.hibernated(id));
  }

  /** A sandbox died or hung on its own: keep the record as dead, with the reason. */
  async markDead(id: string, reason: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (!r || r.state === 'dead') return;
    this.opts.log.warn({ sandbox: id, reason }, 'sandbox died');
    transition(this.opts.registry, id, 'die', reason);
    await this.teardown(id, reason).catch((err: Error) => this.opts.log.error({ sandbox: id, err: err.message }, 'cleanup of dead sandbox failed'));
  }

  async onChannelLost(id: string, reason: string): Promise<void> {
    const r = this.opts.registry.get(id);
    if (r?.state !== 'running') return;
    await this.markDead(id, reason);
  }

  async explain(id: string, fallback: string): Promise<string> {
    const cause = await this.opts.driver.diagnose(id);
    const limits = this.opts.registry.get(id)?.resources;
    if (cause.oomKilled) return `the sandbox died: out of memory (it exceeded its ${limits?.memoryMB ?? '?'} MB memory limit)`;
    if (cause.pidsExhausted) return `the sandbox died: too many processes (it exceeded its limit of ${limits?.pids ?? '?'} processes)`;
    return fallback;
  }
}
