/**
 * Fork: N new sandboxes that continue from one instant of a parent, restored in parallel
 * from one image of it. All or nothing.
 */
import { DEFAULT_MAX_FORK_COUNT, WarrenError, type ForkRequest, type ForkResult, type SandboxInfo } from '@warren/protocol';
import type { UnpackedImage } from '../image-pages.js';
import { ImageStore } from '../images.js';
import { admitResources } from '../admission.js';
import type { SandboxContext, SandboxServiceOptions } from './context.js';
import type { Creator } from './create.js';
import type { SerialOperations } from './operations.js';
import type { Saver } from './save.js';
import type { Teardown } from './teardown.js';
import { recordFor, recordFromImage } from './records.js';

/**
 * Children of one fork restored at once. Restores are CPU-bound (each one alone keeps both
 * cores of the test machine busy), so fewer at a time is no faster: 8 children of a 120 MB
 * parent took 5.6 to 5.8 s with 8 at once, 6.2 to 6.4 s with 4 and 6.3 to 7.0 s with 2. The
 * cap only keeps a 16-child fork from starting 16 runsc processes together.
 */
const FORK_RESTORE_CONCURRENCY = 8;

export class Forker {
  private readonly opts: SandboxServiceOptions;

  constructor(
    ctx: SandboxContext,
    private ops: SerialOperations,
    private saver: Saver,
    private creator: Creator,
    private ending: Teardown,
  ) {
    this.opts = ctx.opts;
  }

  /**
   * N new sandboxes that continue from this instant of the parent: its memory, processes and
   * files. The parent is paused only while its image is written; the children are restored
   * from that image in parallel. All or nothing: if one child fails, none is kept.
   * `whileHeld`: see SandboxService.fork.
   */
  async fork(id: string, req: ForkRequest & { count: number }, whileHeld?: () => Promise<void>): Promise<ForkResult> {
    const max = this.opts.maxForkCount ?? DEFAULT_MAX_FORK_COUNT;
    if (req.count > max)
      throw new WarrenError('invalid_argument', `count must be at most ${max} children per fork, WARREN_MAX_FORK (got ${req.count})`, {
        details: { field: 'count', limit: max },
      });
    // Children get the parent's resources, which an older daemon may have admitted unchecked.
    admitResources(recordFor(this.opts.registry, id, 'fork').resources, this.opts.capacity, `the parent ${id}`);
    return this.ops.serialized(id, async () => {
      const started = Date.now();
      const parent = recordFor(this.opts.registry, id, 'fork');
      let dir = this.opts.images.hibernated(id);
      let parentPausedMs = 0;
      let channelHeldMs = 0;
      let temporary: string | undefined;
      let unpacked: UnpackedImage | undefined;
      try {
        if (parent.state !== 'hibernated') {
          temporary = dir = await this.opts.images.forkDir();
          ({ checkpointMs: parentPausedMs, heldMs: channelHeldMs } = await this.saver.save(id, dir, true, whileHeld));
        } else await whileHeld?.();
        // A hibernated parent's image is packed: unpacked once here, not once per child. Fork
        // images themselves stay unpacked (they live for one fork, and packing costs time).
        unpacked = await this.opts.images.unpack(ImageStore.imagePath(dir));
        const image = unpacked.path;
        const children = await settleLimited(FORK_RESTORE_CONCURRENCY, req.count, () =>
          this.creator.createFromImage(recordFromImage(parent, { ...req, idleSeconds: req.idleSeconds ?? parent.idleSeconds }, 'fork', id), {
            image,
            kind: 'fork',
          }),
        );
        const failed = children.filter((c): c is PromiseRejectedResult => c.status === 'rejected');
        const made = children.filter((c): c is PromiseFulfilledResult<SandboxInfo> => c.status === 'fulfilled').map((c) => c.value);
        const [firstFailure] = failed;
        if (firstFailure) {
          await Promise.all(made.map((c) => this.ending.kill(c.id, 'fork failed').catch(() => undefined)));
          const why = (firstFailure.reason as Error).message;
          throw new WarrenError(
            'unavailable',
            `fork of ${id} failed: ${failed.length} of ${req.count} children could not start (${why}); no child was kept, the parent is unharmed`,
          );
        }
        const totalMs = Date.now() - started;
        this.opts.log.info({ sandbox: id, children: made.map((c) => c.id), parentPausedMs, channelHeldMs, totalMs }, 'sandbox forked');
        return { sandboxes: made, parentPausedMs, channelHeldMs, totalMs };
      } finally {
        await unpacked?.release();
        if (temporary) await this.opts.images.remove(temporary);
      }
    });
  }
}

/** Runs `count` tasks, at most `limit` at a time, and settles them all. */
async function settleLimited<T>(limit: number, count: number, task: () => Promise<T>): Promise<PromiseSettledResult<T>[]> {
  const results: PromiseSettledResult<T>[] = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await task().then(
        (value) => ({ status: 'fulfilled', value }) as const,
        (reason: unknown) => ({ status: 'rejected', reason }) as const,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return results;
}
