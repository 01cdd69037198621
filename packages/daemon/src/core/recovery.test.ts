import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { DEFAULT_RESOURCES } from '@warren/protocol';
import type { SandboxDriver } from '../drivers/driver.js';
import { ImageStore } from './images.js';
import { recover } from './recovery.js';
import { Registry, type SandboxRecord } from './registry.js';
import type { SandboxService } from './sandboxes.js';

function hibernated(id: string): SandboxRecord {
  return {
    id,
    template: 'base',
    state: 'hibernated',
    createdAt: Date.now(),
    expiresAt: Date.now() + 3_600_000,
    metadata: { n: id },
    env: {},
    resources: DEFAULT_RESOURCES,
    rootfs: '/x',
    apiKeyId: 'admin',
    boot: 'cold',
    network: [],
  };
}

test('recovery keeps thousands of hibernated sandboxes with complete images as they are, without touching the driver', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-recovery-'));
  const reg = new Registry(path.join(dir, 'db'));
  const images = new ImageStore(path.join(dir, 'images'));
  const destroyed: string[] = [];
  // Nothing runs on the host: any destroy is recovery treating a hibernated record as broken.
  const driver = {
    list: async () => [],
    destroy: async (id: string) => void destroyed.push(id),
  } as unknown as SandboxDriver;
  try {
    const ids = Array.from({ length: 3000 }, (_, i) => `sb-h${String(i).padStart(5, '0')}`);
    reg.database.transaction(() => {
      for (const id of ids) reg.insert(hibernated(id));
      reg.insert({ ...hibernated('sb-torn'), state: 'hibernating' });
      reg.insert({ ...hibernated('sb-running-image'), state: 'dead' });
    })();
    for (const id of [...ids, 'sb-running-image']) {
      await images.prepare(images.hibernated(id));
      await images.markComplete(images.hibernated(id));
    }
    // A hibernate cut short: its image never got its COMPLETE marker.
    await images.prepare(images.hibernated('sb-torn'));

    const result = await recover({
      registry: reg,
      driver,
      sandboxes: {} as SandboxService,
      images,
      sandboxesDir: path.join(dir, 'sandboxes'),
      log: pino({ level: 'silent' }),
    });

    assert.deepEqual(result, { reattached: 0, lost: 1, orphans: 0 });
    assert.deepEqual(destroyed, ['sb-torn']);
    assert.equal(reg.statesOf(['hibernated']).length, ids.length);
    assert.ok(
      ids.every((id) => images.isComplete(images.hibernated(id))),
      'every complete image is kept',
    );
    assert.equal(reg.get('sb-torn')?.state, 'dead');
    assert.match(reg.get('sb-torn')?.error ?? '', /before its image was complete/);
    assert.equal(existsSync(images.hibernated('sb-torn')), false);
    assert.equal(existsSync(images.hibernated('sb-running-image')), false, 'an image of a sandbox that is not hibernated is removed');
  } finally {
    reg.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
