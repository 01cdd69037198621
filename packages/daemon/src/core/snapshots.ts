/**
 * Snapshots: durable saves of a sandbox (memory, processes, files) that new sandboxes start
 * from (`create({ snapshot })`). The sandbox keeps running. Records are in the registry,
 * images under <home>/images/snapshots/<id>; both survive daemon restarts.
 */
import path from 'node:path';
import type { Logger } from 'pino';
import { WarrenError, type Metadata, type SnapshotInfo } from '@warren/protocol';
import { newId } from './ids.js';
import type { ImageStore } from './images.js';
import type { Registry, SnapshotRecord } from './registry.js';
import type { SandboxService } from './sandboxes.js';

export class SnapshotService {
  constructor(
    private registry: Registry,
    private images: ImageStore,
    private sandboxes: SandboxService,
    private log: Logger,
  ) {}

  async create(sandboxId: string, metadata: Metadata | undefined, apiKeyId: string): Promise<SnapshotInfo> {
    const id = newId('snap');
    const dir = this.images.snapshot(id);
    const started = Date.now();
    try {
      const sandbox = await this.sandboxes.snapshotInto(sandboxId, dir);
      const record: SnapshotRecord = {
        id,
        sandboxId,
        template: sandbox.template,
        rootfs: sandbox.rootfs,
        resources: sandbox.resources,
        env: sandbox.env,
        metadata: metadata ?? sandbox.metadata,
        createdAt: Date.now(),
        sizeBytes: await this.images.size(dir),
        apiKeyId,
      };
      this.registry.insertSnapshot(record);
      this.log.info({ snapshot: id, sandbox: sandboxId, sizeBytes: record.sizeBytes, ms: Date.now() - started }, 'snapshot taken');
      return toSnapshotInfo(record);
    } catch (err) {
      await this.images.remove(dir);
      throw err;
    }
  }

  get(id: string): SnapshotInfo {
    return toSnapshotInfo(this.record(id));
  }

  /** `apiKeyId`: only the snapshots that key took. */
  list(apiKeyId?: string): SnapshotInfo[] {
    return this.registry
      .listSnapshots()
      .filter((s) => apiKeyId === undefined || s.apiKeyId === apiKeyId)
      .map(toSnapshotInfo);
  }

  async delete(id: string): Promise<void> {
    this.record(id);
    this.registry.deleteSnapshot(id);
    await this.images.remove(this.images.snapshot(id));
    this.log.info({ snapshot: id }, 'snapshot deleted');
  }

  /**
   * After a restart: records whose image is incomplete (a crash mid-save cannot leave one,
   * the record is written last, but a disk can lose it) are dropped, and image directories
   * without a record (a crash between the two) are removed.
   */
  async reconcile(): Promise<void> {
    const known = new Set<string>();
    for (const r of this.registry.listSnapshots()) {
      if (this.images.isComplete(this.images.snapshot(r.id))) known.add(r.id);
      else {
        this.log.warn({ snapshot: r.id }, 'snapshot image missing; dropping the snapshot');
        this.registry.deleteSnapshot(r.id);
      }
    }
    for (const name of await this.images.list('snapshots')) {
      if (!known.has(name)) await this.images.remove(this.images.snapshot(name));
    }
  }

  private record(id: string): SnapshotRecord {
    const r = this.registry.getSnapshot(id);
    if (!r) throw new WarrenError('not_found', `no snapshot with id ${id}`);
    return r;
  }
}

function toSnapshotInfo(r: SnapshotRecord): SnapshotInfo {
  return {
    id: r.id,
    sandboxId: r.sandboxId,
    template: r.template,
    templateVersion: path.basename(path.dirname(r.rootfs)),
    createdAt: new Date(r.createdAt).toISOString(),
    sizeBytes: r.sizeBytes,
    metadata: r.metadata,
    resources: r.resources,
  };
}
