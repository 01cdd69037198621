/**
 * When the heartbeat pings a sandbox's agent. A ping is a round trip into the sandbox: the
 * Sentry wakes, the agent's node process wakes, and the Sentry then polls for a few tens of
 * milliseconds before it parks again. Measured on an idle sandbox (strace of its Sentry), a
 * ping every 5 s was most of its idle CPU (about 0.25% of a core, against ~0 for a raw
 * `runsc run sleep`). Everything else the heartbeat watches is read on the host (the disk
 * limit, the daemon's own calls and tunnels), and a Sentry that dies closes the channel,
 * which the daemon hears at once; only a hung agent and the count of running commands need
 * the round trip. So a sandbox with something going on is pinged every 5 s as before, and a
 * quiet one less and less often, up to once a minute.
 */

/** The ping interval of a sandbox with something going on, and the heartbeat's tick. */
export const PING_MIN_MS = 5_000;
/**
 * The longest gap between pings of a quiet sandbox: at about 13 ms of Sentry CPU per ping,
 * 0.02% of a core. A hung quiet sandbox is found within about this plus the missed pings
 * (HEARTBEAT_MISSES_ALLOWED of them, retried at the short interval), instead of about 30 s.
 */
export const PING_MAX_MS = 60_000;

/** A sandbox's (or pool member's) ping bookkeeping. */
export interface PingSchedule {
  /** When the last ping was sent, or when the heartbeat first saw the sandbox. */
  at: number;
  /** Pings in a row that found nothing going on: each doubles the interval. */
  quiet: number;
}

export function newSchedule(now: number): PingSchedule {
  return { at: now, quiet: 0 };
}

/** The wait after the last ping: 5 s, doubled for each quiet ping, at most PING_MAX_MS. */
export function pingInterval(quiet: number): number {
  return Math.min(PING_MIN_MS * 2 ** Math.min(quiet, 16), PING_MAX_MS);
}

export interface PingNeeds {
  /** Pings missed in a row: a sandbox that missed one is retried at the short interval. */
  missed: number;
  /** Last activity (an API call, a running command, an open tunnel); absent: none seen. */
  lastActive?: number;
  /**
   * The sandbox has been idle for its idleSeconds: before it is hibernated, a ping must
   * confirm that no command runs (only the agent knows about background commands).
   */
  confirmIdle: boolean;
}

/**
 * Whether to ping now. Activity since the last ping resets the interval to the shortest:
 * a sandbox in use (or running a command, which a ping reports as activity) keeps the 5 s
 * heartbeat, so a command's end is seen within 5 s and idleSeconds counts from there.
 */
export function pingDue(s: PingSchedule, now: number, needs: PingNeeds): boolean {
  if (needs.lastActive !== undefined && needs.lastActive > s.at) s.quiet = 0;
  if (needs.missed > 0 || needs.confirmIdle) return true;
  // Checks come once per heartbeat tick: half a tick of slack keeps a timer firing a little
  // early from pushing the ping a whole tick later.
  return now - s.at >= pingInterval(s.quiet) - PING_MIN_MS / 2;
}

/** Records a ping about to be sent. */
export function pinged(s: PingSchedule, now: number): void {
  s.at = now;
}

/** Records a ping's answer: `active` (a command runs, a call is open) keeps the interval short. */
export function answered(s: PingSchedule, active: boolean): void {
  s.quiet = active ? 0 : s.quiet + 1;
}
