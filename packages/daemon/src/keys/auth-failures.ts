/**
 * Failed authentications per source address: past a limit in any 60 s, the address gets 429
 * for every call until the window frees, before any key is looked at, so guessing keys
 * learns nothing faster than the limit allows (docs/security.md).
 */
import { WarrenError } from '@warren/protocol';

const WINDOW_MS = 60_000;
/** Addresses remembered at most; past it, those with no failure in the window are dropped. */
const MAX_ADDRESSES = 10_000;

export class AuthFailureLimiter {
  private readonly failures = new Map<string, number[]>();

  constructor(
    private readonly perMinute: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** 429 with the seconds to wait if the address is over the limit. */
  check(address: string): void {
    const recent = this.recent(address);
    if (recent.length < this.perMinute) return;
    const retryAfterSeconds = Math.max(1, Math.ceil((recent[recent.length - this.perMinute]! + WINDOW_MS - this.now()) / 1000));
    throw new WarrenError(
      'resource_exhausted',
      `too many failed authentications from ${address} (${this.perMinute} in 60 s); retry in ${retryAfterSeconds} s`,
      { details: { limit: 'authFailuresPerMinute', max: this.perMinute, retryAfterSeconds } },
    );
  }

  fail(address: string): void {
    const recent = this.recent(address);
    recent.push(this.now());
    this.failures.set(address, recent);
    if (this.failures.size > MAX_ADDRESSES) {
      for (const [a] of this.failures) if (this.recent(a).length === 0) this.failures.delete(a);
    }
  }

  private recent(address: string): number[] {
    const since = this.now() - WINDOW_MS;
    const list = (this.failures.get(address) ?? []).filter((t) => t > since);
    if (list.length) this.failures.set(address, list);
    else this.failures.delete(address);
    return list;
  }
}
