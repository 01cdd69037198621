/**
 * Quotas per API key (docs/security.md): how many sandboxes a key may hold running, with how
 * many vCPUs and how much memory, and how many it may start per minute. Checked before a
 * create, fork or resume does anything, so a refusal leaves nothing behind. What a call was
 * admitted for is held until it ends (release), so that calls racing for the last slot do not
 * both pass: until then the registry may not show what it is making.
 */
import { WarrenError, type KeyQuotas } from '@warren/protocol';
import type { Principal } from './service.js';

const WINDOW_MS = 60_000;

export interface SandboxSize {
  cpus: number;
  memoryMB: number;
}

/** What a key holds now: its sandboxes being created or running. */
export type HeldBy = (keyId: string) => SandboxSize[];

/** Room a call was admitted for; release it once the call has ended, whichever way. */
export interface Admission {
  release(): void;
}

const NOTHING_HELD: Admission = { release: () => {} };

/** Runs `work` with the room admitted held, and releases it when `work` has ended, whichever way. */
export async function holding<T>(admission: Admission | undefined, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } finally {
    admission?.release();
  }
}

export class QuotaGate {
  /** Start times within the last minute, per key and kind. */
  private readonly starts = new Map<string, number[]>();
  /** Sandboxes admitted and not yet released, per key. */
  private readonly pending = new Map<string, Set<SandboxSize[]>>();

  constructor(
    private readonly heldBy: HeldBy,
    private readonly now: () => number = Date.now,
    /** Bytes of a key's hibernation images. */
    private readonly hibernatedBytes: (keyId: string) => number = () => 0,
  ) {}

  /**
   * 429 naming the limit unless `count` more sandboxes of `size` fit the key's quotas (and
   * `more`: the databases a workspace's create or fork makes with it); records them as started.
   */
  admit(p: Principal, kind: 'create' | 'fork', count: number, size: SandboxSize, more: SandboxSize[] = []): Admission {
    const q = p.quotas;
    if (!q) return NOTHING_HELD;
    const adding = [...Array.from({ length: count }, () => size), ...more];
    this.fitHeld(p.keyId, q, kind, adding);
    this.fitRate(p.keyId, q, kind, adding.length);
    return this.hold(p.keyId, adding);
  }

  /** A hibernated sandbox of the key coming back counts against what it may hold running. */
  admitResume(keyId: string, quotas: KeyQuotas | undefined, size: SandboxSize): Admission {
    if (!quotas) return NOTHING_HELD;
    this.fitHeld(keyId, quotas, 'resume', [size]);
    return this.hold(keyId, [size]);
  }

  /**
   * A sandbox of the key may hibernate while its images take less than `hibernatedDiskMB`
   * (an image's size is known only once written, so the last one may pass the limit).
   */
  admitHibernate(keyId: string, quotas: KeyQuotas | undefined): void {
    const max = quotas?.hibernatedDiskMB;
    if (max === undefined) return;
    const usedMB = this.hibernatedBytes(keyId) / (1024 * 1024);
    if (usedMB >= max)
      throw new WarrenError(
        'resource_exhausted',
        `API key ${keyId} is at its quota hibernatedDiskMB = ${max} MB: its hibernated sandboxes' images take ${Math.round(usedMB)} MB; resume or end some first`,
        { details: { limit: 'hibernatedDiskMB', max, used: Math.round(usedMB) } },
      );
  }

  private fitHeld(keyId: string, q: KeyQuotas, kind: string, adding: SandboxSize[]): void {
    const held = [...this.heldBy(keyId), ...[...(this.pending.get(keyId) ?? [])].flat()];
    const fits = (limit: keyof KeyQuotas, used: number, adding: number, unit: string) => {
      const max = q[limit];
      if (max !== undefined && used + adding > max)
        throw new WarrenError(
          'resource_exhausted',
          `API key ${keyId} is at its quota ${limit} = ${max}${unit}: it holds ${round(used)}${unit} and this ${kind} adds ${round(adding)}${unit}; end or hibernate sandboxes first`,
          { details: { limit, max, used: round(used) } },
        );
    };
    fits('sandboxes', held.length, adding.length, '');
    fits('vcpus', sum(held, 'cpus'), sum(adding, 'cpus'), ' vCPUs');
    fits('memoryMB', sum(held, 'memoryMB'), sum(adding, 'memoryMB'), ' MB');
  }

  private hold(keyId: string, entry: SandboxSize[]): Admission {
    const set = this.pending.get(keyId) ?? new Set();
    set.add(entry);
    this.pending.set(keyId, set);
    return {
      release: () => {
        set.delete(entry);
        if (set.size === 0 && this.pending.get(keyId) === set) this.pending.delete(keyId);
      },
    };
  }

  private fitRate(keyId: string, q: KeyQuotas, kind: 'create' | 'fork', count: number): void {
    const limit = kind === 'create' ? 'createsPerMinute' : 'forksPerMinute';
    const max = q[limit];
    if (max === undefined) return;
    const now = this.now();
    const key = `${keyId}\n${kind}`;
    const recent = (this.starts.get(key) ?? []).filter((t) => t > now - WINDOW_MS);
    if (recent.length + count > max) {
      // The oldest start that has to leave the window before `count` more fit.
      const oldest = recent[recent.length + count - max - 1] ?? now;
      const retryAfterSeconds = Math.max(1, Math.ceil((oldest + WINDOW_MS - now) / 1000));
      throw new WarrenError(
        'resource_exhausted',
        `API key ${keyId} is at its quota ${limit} = ${max}: ${recent.length} in the last 60 s; retry in ${retryAfterSeconds} s`,
        { details: { limit, max, retryAfterSeconds } },
      );
    }
    for (let i = 0; i < count; i++) recent.push(now);
    this.starts.set(key, recent);
  }
}

function sum(list: SandboxSize[], field: keyof SandboxSize): number {
  return list.reduce((total, s) => total + s[field], 0);
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}
