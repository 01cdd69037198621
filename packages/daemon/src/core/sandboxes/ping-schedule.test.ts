import { test } from 'node:test';
import assert from 'node:assert/strict';
import { answered, newSchedule, PING_MAX_MS, PING_MIN_MS, pingDue, pinged, pingInterval } from './ping-schedule.js';

const quietNeeds = { missed: 0, confirmIdle: false };

/** Runs the heartbeat's ticks for `ms` on a sandbox that never does anything; returns the ping times. */
function pingsOfQuietSandbox(ms: number): number[] {
  const s = newSchedule(0);
  const at: number[] = [];
  for (let now = PING_MIN_MS; now <= ms; now += PING_MIN_MS) {
    if (!pingDue(s, now, quietNeeds)) continue;
    pinged(s, now);
    answered(s, false);
    at.push(now);
  }
  return at;
}

test('a quiet sandbox is pinged less and less often, down to once per PING_MAX_MS', () => {
  assert.equal(pingInterval(0), PING_MIN_MS);
  assert.equal(pingInterval(1), 2 * PING_MIN_MS);
  assert.equal(pingInterval(50), PING_MAX_MS);
  const at = pingsOfQuietSandbox(10 * 60_000);
  const gaps = at.slice(1).map((t, i) => t - at[i]!);
  assert.deepEqual(gaps.slice(0, 4), [10_000, 20_000, 40_000, 60_000]);
  assert.ok(
    gaps.slice(3).every((g) => g === PING_MAX_MS),
    `gaps ${gaps.join(',')}`,
  );
  // Ten minutes: 5 pings to back off, then one a minute; a 5 s heartbeat sent 120.
  assert.ok(at.length <= 15, `${at.length} pings in 10 minutes`);
});

test('activity since the last ping brings the short interval back', () => {
  const s = newSchedule(0);
  for (let i = 0; i < 6; i++) answered(s, false);
  assert.equal(pingDue(s, 10_000, quietNeeds), false);
  // An API call at 7 s: the next tick pings again 5 s after the last ping.
  assert.equal(pingDue(s, 5_000, { ...quietNeeds, lastActive: 7_000 }), true);
  assert.equal(s.quiet, 0);
  // Activity before the last ping changes nothing.
  pinged(s, 20_000);
  answered(s, false);
  answered(s, false);
  assert.equal(pingDue(s, 25_000, { ...quietNeeds, lastActive: 19_000 }), false);
});

test('a ping that finds a command running keeps the sandbox on the short interval', () => {
  const s = newSchedule(0);
  for (let now = PING_MIN_MS; now <= 60_000; now += PING_MIN_MS) {
    assert.ok(pingDue(s, now, quietNeeds), `a busy sandbox is pinged at every tick (${now} ms)`);
    pinged(s, now);
    answered(s, true);
  }
});

test('a missed ping is retried at the next tick, and so is an idle sandbox about to hibernate', () => {
  const s = newSchedule(0);
  for (let i = 0; i < 6; i++) answered(s, false);
  pinged(s, 0);
  assert.equal(pingDue(s, PING_MIN_MS, quietNeeds), false);
  assert.equal(pingDue(s, PING_MIN_MS, { missed: 1, confirmIdle: false }), true);
  assert.equal(pingDue(s, PING_MIN_MS, { missed: 0, confirmIdle: true }), true);
});

test('a tick firing a little early does not push the ping a whole tick later', () => {
  const s = newSchedule(0);
  assert.equal(pingDue(s, PING_MIN_MS - 30, quietNeeds), true);
});
