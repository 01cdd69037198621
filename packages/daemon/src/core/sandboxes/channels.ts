/**
 * Guest channels: opening one on a booted sandbox's streams, attach relays for agents whose
 * stdio ended with an earlier daemon, and closing them. Owns nothing but the live map's
 * entries; what a lost channel means is the hooks' business.
 */
import type { Duplex } from 'node:stream';
import { WarrenError, type TcpForward } from '@warren/protocol';
import type { GuestStreams } from '../../drivers/driver.js';
import { GuestClient } from '../guest-client.js';
import { AGENT_READY_TIMEOUT_MS, type EgressServer, type Live, type SandboxContext, type SandboxServiceOptions } from './context.js';

/** What an open channel reports to the rest of the service. */
export interface ChannelHooks {
  /** Why the sandbox behind a channel went away (the driver's diagnosis), else fallback. */
  explain(id: string, fallback: string): Promise<string>;
  /** The channel of a registered sandbox closed without anyone asking. */
  lost(id: string, reason: string): Promise<void>;
  /** An egress connection the sandbox opened. */
  tunnel(egress: EgressServer, id: string, conn: Duplex, forward: TcpForward | undefined): void;
}

export class Channels {
  private readonly opts: SandboxServiceOptions;
  private readonly live: Map<string, Live>;

  constructor(
    ctx: SandboxContext,
    private hooks: ChannelHooks,
  ) {
    this.opts = ctx.opts;
    this.live = ctx.live;
  }

  /**
   * The channel of a restored sandbox whose agent no longer serves its stdio: an attach
   * relay. The restore's own stdio stays open (drained) for the sandbox's init, which still
   * holds it.
   */
  async relayTo(id: string, restored: GuestStreams): Promise<GuestStreams> {
    restored.fromGuest.resume();
    try {
      const relay = await this.opts.driver.attach(id);
      return {
        fromGuest: relay.fromGuest,
        toGuest: relay.toGuest,
        release: () => {
          relay.release();
          restored.release();
        },
        ...(relay.detach ? { detach: relay.detach } : {}),
      };
    } catch (err) {
      restored.release();
      throw err;
    }
  }

  guestOf(id: string): GuestClient {
    const live = this.live.get(id);
    if (!live) throw new WarrenError('unavailable', `sandbox ${id} has no guest channel`);
    return live.client;
  }

  /** Ends a quiesced sandbox's relay channel on purpose (not a lost sandbox). */
  async dropRelay(id: string, live: Live): Promise<void> {
    this.live.delete(id);
    live.client.close('relay ended for a checkpoint');
    await live.streams.detach?.();
    live.streams.release();
  }

  /** A new relay channel to a sandbox whose relay was dropped for a checkpoint that left it running. */
  async reattach(id: string): Promise<void> {
    const live = this.openChannel(id, await this.opts.driver.attach(id), true);
    this.live.set(id, live);
    await live.client.request('hello', {}, AGENT_READY_TIMEOUT_MS);
  }

  openChannel(id: string, streams: GuestStreams, relayed = false): Live {
    const client = new GuestClient(streams.fromGuest, streams.toGuest, (raw) => this.hooks.explain(id, `agent channel lost (${raw})`));
    const egress = this.opts.egress;
    if (egress) client.onTunnel((conn, forward) => this.hooks.tunnel(egress, id, conn, forward));
    const live: Live = { client, streams, missed: 0, checking: false, relayed };
    client.onClose((reason) => {
      if (this.live.get(id) === live) void this.hooks.lost(id, reason);
    });
    return live;
  }

  /**
   * Closes the sandbox's channel and removes its runsc container and host directory;
   * `stopped`: a checkpoint has already stopped it.
   */
  async release(id: string, reason: string, opts: { stopped?: boolean } = {}): Promise<void> {
    const live = this.live.get(id);
    this.live.delete(id);
    if (live) {
      live.client.close(reason);
      live.streams.release();
    }
    if (opts.stopped) await this.opts.driver.removeStopped(id);
    else await this.opts.driver.destroy(id);
  }

  /** Closes every channel without touching the sandboxes (daemon shutdown). */
  detachAll(): void {
    for (const [id, live] of this.live) {
      this.live.delete(id);
      live.client.close('daemon shutting down');
      live.streams.release();
    }
  }
}
