/**
 * Start-up reconciliation after a daemon restart (clean or kill -9): make the registry and
 * the host agree. Sandboxes the registry says are running and the driver still has are
 * re-attached; registry entries without a sandbox are marked dead; sandboxes on the host
 * that the registry does not know (or that never finished creating) are destroyed.
 */
import { readdir } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { SandboxDriver } from '../drivers/driver.js';
import type { Registry } from './registry.js';
import type { SandboxService } from './sandboxes.js';
import { BUILD_CONTAINER_PREFIX } from '../templates/builder.js';

export async function recover(opts: {
  registry: Registry;
  driver: SandboxDriver;
  sandboxes: SandboxService;
  sandboxesDir: string;
  log: Logger;
}): Promise<{ reattached: number; lost: number; orphans: number }> {
  const { registry, driver, sandboxes, log } = opts;
  // Template build containers (build-*) belong to the template builder, which clears the
  // ones whose build died (templates/staging.ts); a live one may be a local build's.
  const onHost = new Map((await driver.list()).filter((s) => !s.id.startsWith(BUILD_CONTAINER_PREFIX)).map((s) => [s.id, s]));
  let reattached = 0;
  let lost = 0;
  let orphans = 0;

  for (const r of registry.inStates(['creating', 'running'])) {
    const host = onHost.get(r.id);
    onHost.delete(r.id);
    if (r.state === 'creating') {
      // Its creator is gone; nobody is waiting for it. Undo it completely.
      await driver.destroy(r.id);
      registry.delete(r.id);
      orphans++;
      continue;
    }
    if (!host?.running) {
      await driver.destroy(r.id);
      registry.setState(r.id, 'dead', 'the sandbox stopped while the daemon was down');
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
  log.info({ reattached, lost, orphans }, 'recovery finished');
  return { reattached, lost, orphans };
}
