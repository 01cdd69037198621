/**
 * What makes creates fast: a template's warm pool (ready sandboxes waiting to be claimed)
 * and its baked image (a checkpoint taken after the start command became ready).
 */
import type { BakeInfo, PoolInfo } from '@warren/protocol';
import { HttpClient, type ConnectionOptions } from './client.js';

function route(template: string, what: 'pool' | 'bake'): string {
  return `/v1/templates/${encodeURIComponent(template)}/${what}`;
}

/** The pool's configured size, members ready now, hits, misses and claim latency. */
export function getPool(template: string, opts: ConnectionOptions = {}): Promise<PoolInfo> {
  return new HttpClient(opts).json<PoolInfo>('GET', route(template, 'pool'));
}

/** Keeps `size` sandboxes of the template ready (0 turns the pool off); refills in the background. */
export function setPoolSize(template: string, size: number, opts: ConnectionOptions = {}): Promise<PoolInfo> {
  return new HttpClient(opts).json<PoolInfo>('PUT', route(template, 'pool'), { json: { size } });
}

export function getBake(template: string, opts: ConnectionOptions = {}): Promise<BakeInfo> {
  return new HttpClient(opts).json<BakeInfo>('GET', route(template, 'bake'));
}

/**
 * Bakes the template's current version now and waits for it. A failed bake resolves with
 * state 'failed' and the reason: the template stays usable, its creates boot cold.
 */
export function bake(template: string, opts: ConnectionOptions = {}): Promise<BakeInfo> {
  return new HttpClient(opts).json<BakeInfo>('POST', route(template, 'bake'));
}
