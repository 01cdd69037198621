/**
 * Start-up reconciliation after a daemon restart (clean or kill -9): make the registry and
 * the host agree. Sandboxes the registry says are running and the driver still has are
 * re-attached; registry entries without a sandbox are marked dead; sandboxes on the host
 * that the registry does not know (or that never finished creating) are destroyed.
 *
 * A hibernate cut short ends as whichever side it reached: hibernated if its image is
 * complete, running if the sandbox still runs, dead (with the reason) otherwise. A resume
 * cut short leaves the sandbox hibernated (its image is removed only after it ran). A
 * packing of the image's memory file cut short needs nothing here: every state it leaves is
 * a valid image (core/image-pages.ts), and the scratch copies of a resume cut short go with
 * ImageStore.clearStale at start.
 */
import { readdir } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { SandboxDriver } from '../drivers/driver.js';
import type { ImageStore } from './images.js';
import type { Registry } from './registry.js';
import { transition } from './lifecycle.js';
import type { SandboxService } from './sandboxes.js';
import { BUILD_CONTAINER_PREFIX } from '../templates/builder.js';

export async function recover(opts: {
  registry: Registry;
  driver: SandboxDriver;
  sandboxes: SandboxService;
  images: ImageStore;
  sandboxesDir: string;
  log: Logger;
}): Promise<{ reattached: number; lost: number; orphans: number }> {
  const { registry, driver, sandboxes, images, log } = opts;
  // Template build containers (build-*) belong to the template builder, which clears the
  // ones whose build died (templates/staging.ts); a live one may be a local build's.
  const onHost = new Map((await driver.list()).filter((s) => !s.id.startsWith(BUILD_CONTAINER_PREFIX)).map((s) => [s.id, s]));
  let reattached = 0;
  let lost = 0;
  let orphans = 0;

  // Hibernated sandboxes may number tens of thousands (10,000 in the density bench): this
  // loop reads only their ids and states and writes only records whose state changes. A
  // write per record (each its own commit) made a start with 10,000 take several seconds.
  const hibernated = new Set<string>();
  for (const r of registry.statesOf(['hibernating', 'hibernated'])) {
    const host = onHost.get(r.id);
    const saved = images.isComplete(images.hibernated(r.id));
    if (saved) {
      if (host) await driver.destroy(r.id); // a resume or a hibernate that had not finished
      onHost.delete(r.id);
      if (r.state !== 'hibernated') transition(registry, r.id, 'recover-saved');
      hibernated.add(r.id);
    } else if (host?.running) {
      transition(registry, r.id, 'recover-running'); // the hibernate never got to save it: re-attached below
      await images.remove(images.hibernated(r.id));
    } else {
      onHost.delete(r.id);
      await driver.destroy(r.id);
      await images.remove(images.hibernated(r.id));
      transition(registry, r.id, 'die', 'the daemon stopped while the sandbox was hibernating, before its image was complete');
      lost++;
    }
  }

  for (const r of registry.inStates(['creating', 'running'])) {
    const host = onHost.get(r.id);
    onHost.delete(r.id);
    if (r.state === 'creating') {
      // Its creator is gone; nobody is waiting for it. Undo it completely.
      await driver.destroy(r.id);
      transition(registry, r.id, 'remove');
      orphans++;
      continue;
    }
    if (!host?.running) {
      await driver.destroy(r.id);
      transition(registry, r.id, 'die', 'the sandbox stopped while the daemon was down');
      lost++;
      continue;
    }
    try {
      const streams = await driver.attach(r.id);
      await sandboxes.connect(r, streams);
      reattached++;
    } catch (err) {
      log.error({ sandbox: r.id, err: (err as Error).message }, 'could not re-attach after restart');
      await sandboxes.markDead(r.id, `could not re-attach after daemon restart: ${(err as Error).message}`);
      lost++;
    }
  }

  for (const id of onHost.keys()) {
    log.warn({ sandbox: id }, 'destroying sandbox unknown to the registry');
    await driver.destroy(id);
    orphans++;
  }
  // Host directories left by a crash between mkdir and registry insert.
  let dirs: string[] = [];
  try {
    dirs = await readdir(opts.sandboxesDir);
  } catch {
    dirs = [];
  }
  for (const id of dirs) {
    if (!registry.get(id) || registry.get(id)?.state === 'dead') {
      await driver.destroy(id);
    }
  }
  // Images of sandboxes that are not hibernated (any more): a resume that ran but had not
  // removed its image yet, or a sandbox killed meanwhile.
  for (const id of await images.list('hibernated')) {
    if (!hibernated.has(id)) await images.remove(images.hibernated(id));
  }
  log.info({ reattached, lost, orphans }, 'recovery finished');
  return { reattached, lost, orphans };
}
