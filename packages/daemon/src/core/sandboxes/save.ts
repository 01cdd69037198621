/**
 * Saving a running sandbox's machine (memory, processes, files) into an image directory:
 * the step hibernate, fork and snapshot share. The guest channel is quiesced around it so
 * that the image holds the channel between frames.
 */
import { mkdir, statfs } from 'node:fs/promises';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import { ImageStore } from '../images.js';
import type { Live, SandboxContext, SandboxServiceOptions } from './context.js';
import type { Channels } from './channels.js';
import type { Teardown } from './teardown.js';

/** Free disk kept beyond a save's estimated size (runsc's own files, the registry, logs). */
const IMAGE_HEADROOM_BYTES = 64 * 1024 * 1024;
/** The agent answers 'quiesce' at once unless it is swamped; a hung one fails the checkpoint. */
const QUIESCE_TIMEOUT_MS = 10_000;

export class Saver {
  private readonly opts: SandboxServiceOptions;
  private readonly live: Map<string, Live>;

  constructor(
    ctx: SandboxContext,
    private channels: Channels,
    private ending: Teardown,
  ) {
    this.opts = ctx.opts;
    this.live = ctx.live;
  }

  /**
   * Saves a running sandbox into dir (an ImageStore directory) and marks it complete. The
   * guest channel is quiesced first so that the image holds it between frames; with
   * leaveRunning the sandbox carries on afterwards. Returns how long the checkpoint took
   * (the processes are stopped only inside it) and how long calls waited. `whileHeld` runs
   * once the channel is held, before the checkpoint; if it fails, nothing is saved.
   */
  async save(id: string, dir: string, leaveRunning: boolean, whileHeld?: () => Promise<void>): Promise<{ checkpointMs: number; heldMs: number }> {
    const live = this.live.get(id);
    if (!live || live.client.closed) throw new WarrenError('unavailable', `sandbox ${id} is not reachable right now; retry shortly`);
    await this.requireRoomForImage(id, dir);
    await this.opts.images.prepare(dir);
    // From here calls on the sandbox wait in the held channel; its processes keep running
    // until the checkpoint stops them, and (leaveRunning) start again as it returns.
    const held = Date.now();
    await live.client.quiesce(QUIESCE_TIMEOUT_MS);
    // A relay's host descriptors cannot be restored: it must not be in the image.
    if (live.relayed) await this.channels.dropRelay(id, live);
    const quiesced = Date.now();
    let stopped = false;
    let checkpointMs = 0;
    try {
      await whileHeld?.();
      const checkpointStarted = Date.now();
      await this.opts.driver.checkpoint(id, ImageStore.imagePath(dir), { leaveRunning });
      checkpointMs = Date.now() - checkpointStarted;
      stopped = !leaveRunning;
    } catch (err) {
      await this.opts.images.remove(dir);
      throw err;
    } finally {
      // A failed checkpoint leaves the sandbox running: it must get its channel back.
      if (!stopped) {
        if (live.relayed)
          await this.channels
            .reattach(id)
            .catch((err: Error) => this.ending.markDead(id, `its agent could not be reached again after a checkpoint: ${err.message}`));
        else live.client.unquiesce();
      }
    }
    const heldMs = Date.now() - held;
    this.opts.log.info({ sandbox: id, quiesceMs: quiesced - held, checkpointMs, heldMs, relayed: live.relayed }, 'sandbox saved');
    if (live.relayed) await this.opts.images.markRelayed(dir);
    await this.opts.images.markComplete(dir);
    return { checkpointMs, heldMs };
  }

  /**
   * Refuses a save that would not fit: runsc kills a sandbox whose checkpoint fails midway
   * (measured with a full disk, 2026-12-02), so the space is checked before it starts.
   */
  private async requireRoomForImage(id: string, dir: string): Promise<void> {
    const needed = (await this.opts.driver.imageSizeEstimate(id)) + IMAGE_HEADROOM_BYTES;
    const fs = await statfs(path.dirname(dir)).catch(async () => {
      await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
      return statfs(path.dirname(dir));
    });
    const free = fs.bavail * fs.bsize;
    if (needed > free) {
      throw new WarrenError(
        'resource_exhausted',
        `not enough disk for the image of sandbox ${id}: it needs up to ${mb(needed)} MB, ${mb(free)} MB are free under ${path.dirname(dir)}; the sandbox was not touched`,
      );
    }
  }
}

function mb(bytes: number): number {
  return Math.round(bytes / 1e6);
}
