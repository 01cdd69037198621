/**
 * Hibernate and resume: a sandbox's machine goes to disk and it holds no host process and
 * no RAM, and comes back from that image as it was.
 */
import { WarrenError, type SandboxInfo } from '@warren/protocol';
import { DamagedImageError } from '../image-pages.js';
import { ImageStore } from '../images.js';
import { transition } from '../lifecycle.js';
import type { Live, SandboxContext, SandboxServiceOptions } from './context.js';
import type { Booter } from './boot.js';
import type { Channels } from './channels.js';
import type { SandboxEgress } from './egress.js';
import type { SerialOperations } from './operations.js';
import type { Saver } from './save.js';
import type { Teardown } from './teardown.js';
import { infoOf, pinnedTemplate, recordFor } from './records.js';

/**
 * How long a hibernate waits for calls that are finishing. A read of a file of known length
 * answers its client with the last byte, and the agent's End frame for that stream can come
 * a moment later: a client that reads a file and then hibernates must not see a conflict.
 */
const FINISHING_CALLS_GRACE_MS = 500;

/** The calls in progress on a sandbox's channel, after giving finishing ones a moment to end. */
async function settledUses(live: Live): Promise<string[]> {
  const deadline = Date.now() + FINISHING_CALLS_GRACE_MS;
  let uses = live.client.inUse();
  while (uses.length && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    uses = live.client.inUse();
  }
  return uses;
}

export class Hibernation {
  private readonly opts: SandboxServiceOptions;
  private readonly live: Map<string, Live>;
  private readonly hooks: { hibernated: Array<(id: string) => void>; resumed: Array<(id: string) => void> } = { hibernated: [], resumed: [] };

  constructor(
    ctx: SandboxContext,
    private ops: SerialOperations,
    private saver: Saver,
    private booter: Booter,
    private channels: Channels,
    private egress: SandboxEgress,
    private ending: Teardown,
  ) {
    this.opts = ctx.opts;
    this.live = ctx.live;
  }

  /** Runs after each hibernate (explicit or idle) that put a sandbox to disk. */
  onHibernated(hook: (id: string) => void): void {
    this.hooks.hibernated.push(hook);
  }

  /** Runs after each resume that brought a sandbox back. */
  onResumed(hook: (id: string) => void): void {
    this.hooks.resumed.push(hook);
  }

  /**
   * Hibernates a sandbox: its memory, processes and files go to disk, and it then holds no
   * host process and no RAM. Refused while calls on it are in progress (their streams would
   * be cut); running commands are fine, they continue after the resume.
   */
  hibernate(id: string, reason = 'requested'): Promise<SandboxInfo> {
    recordFor(this.opts.registry, id, 'hibernate');
    return this.ops.serialized(id, async () => {
      const r = recordFor(this.opts.registry, id, 'hibernate');
      if (r.state === 'hibernated') return infoOf(this.opts.registry, id);
      const live = this.live.get(id);
      const inUse = live ? await settledUses(live) : [];
      if (inUse.length) {
        throw new WarrenError('conflict', `sandbox ${id} has ${inUse.length} call(s) in progress (${inUse.join(', ')}); hibernate it when they have finished`);
      }
      const started = Date.now();
      const dir = this.opts.images.hibernated(id);
      transition(this.opts.registry, id, 'hibernate');
      try {
        await this.saver.save(id, dir, false);
      } catch (err) {
        // The checkpoint failed and save() gave the sandbox its channel back, unless that
        // failed too and marked it dead: a dead sandbox stays dead.
        if (this.opts.registry.get(id)?.state === 'hibernating') transition(this.opts.registry, id, 'hibernate-failed');
        const code = err instanceof WarrenError ? err.code : 'internal';
        throw new WarrenError(code, `could not hibernate sandbox ${id}; it keeps running: ${(err as Error).message}`);
      }
      this.opts.meter?.stop(id);
      await this.channels.release(id, 'hibernated', { stopped: true });
      if (!this.opts.registry.get(id)) {
        // Killed while it was being saved: the image is nobody's.
        await this.opts.images.remove(dir);
        throw new WarrenError('not_found', `sandbox ${id} was killed while it hibernated`);
      }
      // Only now is it true that the sandbox holds nothing on the host. A crash before this
      // line is finished by recovery: a complete image makes it hibernated.
      transition(this.opts.registry, id, 'saved');
      // Packed after 'saved': the image is complete and valid unpacked, so a crash or a
      // failure while packing costs disk, never the sandbox (image-pages.ts).
      const packStarted = Date.now();
      await this.opts.images.pack(dir).catch((err: Error) => this.opts.log.warn({ sandbox: id, err: err.message }, 'hibernation image left unpacked'));
      const packMs = Date.now() - packStarted;
      const imageBytes = await this.opts.images.size(dir);
      this.opts.registry.setImageBytes(id, imageBytes);
      this.opts.log.info({ sandbox: id, reason, ms: Date.now() - started, packMs, imageBytes }, 'sandbox hibernated');
      for (const hook of this.hooks.hibernated) hook(id);
      return infoOf(this.opts.registry, id);
    });
  }

  /** Brings a hibernated sandbox back from its image, as it was. Running: nothing to do. */
  resume(id: string): Promise<SandboxInfo> {
    recordFor(this.opts.registry, id, 'resume');
    return this.ops.serialized(id, async () => {
      const r = recordFor(this.opts.registry, id, 'resume');
      if (r.state === 'running') return infoOf(this.opts.registry, id);
      const started = Date.now();
      const dir = this.opts.images.hibernated(id);
      if (!this.opts.images.isComplete(dir)) {
        await this.ending.markDead(id, 'its hibernation image is missing');
        throw new WarrenError('not_found', `sandbox ${id} is dead (its hibernation image is missing); create a new one`);
      }
      let booted: { live: Live };
      try {
        booted = await this.booter.boot(id, pinnedTemplate(r), r.resources, { image: ImageStore.imagePath(dir), kind: r.boot });
      } catch (err) {
        if (err instanceof DamagedImageError) {
          // No later call can do better: the sandbox's state is gone, and it says why.
          await this.ending.markDead(id, `its hibernation image is damaged: ${err.why}`);
          throw new WarrenError('not_found', `sandbox ${id} is dead (its hibernation image is damaged: ${err.why}); create a new one`);
        }
        // The image is untouched: the sandbox stays hibernated and a later call tries again.
        throw new WarrenError('unavailable', `could not resume sandbox ${id} (it stays hibernated): ${(err as Error).message}`);
      }
      this.live.set(id, booted.live);
      // The forwarders came back with the agent's memory; the policy may have changed since.
      await this.egress
        .pushForwards(id)
        .catch((err: Error) => this.opts.log.warn({ sandbox: id, err: err.message }, 'TCP forwarders not updated after resume'));
      this.booter.markRunning(r, 'resume');
      await this.opts.images.remove(dir);
      this.opts.log.info({ sandbox: id, ms: Date.now() - started }, 'sandbox resumed');
      for (const hook of this.hooks.resumed) hook(id);
      return infoOf(this.opts.registry, id);
    });
  }
}
