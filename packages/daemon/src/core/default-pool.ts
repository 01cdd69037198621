/**
 * The warm-pool size of the default template when nobody set one: a create with no options
 * should be a pool claim (about 25 ms) on a host that can spare the memory, and cost nothing
 * on one that cannot.
 */
import { readFileSync } from 'node:fs';
import { DEFAULT_RESOURCES, WarrenError } from '@warren/protocol';

/**
 * Two members: a burst of two creates in a row is served from the pool while the refill
 * (one boot at a time, a baked restore of about 0.3 s) catches up; a third member would
 * rarely be claimed before the refill brings one back, yet costs memory and, with the
 * packaged runsc, 3-4% of a core idle like any sandbox (docs/fast-creates.md).
 */
const DEFAULT_POOL_SIZE = 2;

export interface DefaultPool {
  size: number;
  /** Why this size, for the start-up log. */
  why: string;
}

/**
 * `configured` is WARREN_DEFAULT_POOL (undefined when unset). Unset, the pool gets
 * DEFAULT_POOL_SIZE members when the host has room for them and for two default-sized
 * sandboxes above `minFreeMB` (the level where pools give members back, core/pool.ts);
 * otherwise none, so that on a small host the memory goes to the sandboxes users create.
 */
export function defaultPoolSize(configured: number | undefined, minFreeMB: number, meminfoPath = '/proc/meminfo'): DefaultPool {
  if (configured !== undefined) return { size: configured, why: 'WARREN_DEFAULT_POOL' };
  const availableMB = memAvailableMB(meminfoPath);
  const neededMB = minFreeMB + 2 * DEFAULT_RESOURCES.memoryMB;
  if (availableMB < neededMB)
    return { size: 0, why: `MemAvailable ${availableMB} MB < ${neededMB} MB (WARREN_POOL_MIN_FREE_MB + two default sandboxes): no default pool` };
  return { size: DEFAULT_POOL_SIZE, why: `MemAvailable ${availableMB} MB >= ${neededMB} MB` };
}

function memAvailableMB(meminfoPath: string): number {
  let text: string;
  try {
    text = readFileSync(meminfoPath, 'utf8');
  } catch (err) {
    throw new WarrenError('internal', `cannot read ${meminfoPath} to size the default warm pool; set WARREN_DEFAULT_POOL`, { cause: err });
  }
  const kb = /MemAvailable:\s+(\d+)/.exec(text)?.[1];
  if (kb === undefined) throw new WarrenError('internal', `${meminfoPath} has no MemAvailable line; set WARREN_DEFAULT_POOL`);
  return Math.floor(Number(kb) / 1024);
}
