/**
 * Snapshots of a sandbox's machine into a directory that outlives it (core/snapshots.ts owns
 * the records): a save that leaves it running, or a link of a hibernated sandbox's image.
 */
import { rename } from 'node:fs/promises';
import type { SandboxRecord } from '../registry.js';
import type { SandboxContext, SandboxServiceOptions } from './context.js';
import type { SerialOperations } from './operations.js';
import type { Saver } from './save.js';
import { recordFor } from './records.js';

export class Snapshotter {
  private readonly opts: SandboxServiceOptions;

  constructor(
    ctx: SandboxContext,
    private ops: SerialOperations,
    private saver: Saver,
  ) {
    this.opts = ctx.opts;
  }

  /**
   * Saves the sandbox into dir without stopping it (a snapshot); a hibernated sandbox's image
   * is linked instead, without waking it.
   */
  snapshotInto(id: string, dir: string): Promise<SandboxRecord> {
    recordFor(this.opts.registry, id, 'snapshot');
    return this.ops.serialized(id, async () => {
      const r = recordFor(this.opts.registry, id, 'snapshot');
      if (r.state === 'hibernated') await this.opts.images.linkCopy(this.opts.images.hibernated(id), dir);
      else {
        const tmp = `${dir}.tmp`;
        await this.saver.save(id, tmp, true);
        await this.opts.images.remove(dir);
        await rename(tmp, dir);
      }
      return r;
    });
  }
}
