/** Snapshots: list, get and delete (take one with `sandbox.snapshot()`). */
import type { SnapshotInfo, SnapshotList } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

export const Snapshots = {
  async list(opts: ConnectionOptions = {}): Promise<SnapshotInfo[]> {
    return (await new HttpClient(opts).json<SnapshotList>('GET', '/v1/snapshots')).snapshots;
  },

  async get(id: string, opts: ConnectionOptions = {}): Promise<SnapshotInfo> {
    return new HttpClient(opts).json<SnapshotInfo>('GET', `/v1/snapshots/${encodeURIComponent(id)}`);
  },

  async delete(id: string, opts: ConnectionOptions = {}): Promise<void> {
    await new HttpClient(opts).json('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  },
};
