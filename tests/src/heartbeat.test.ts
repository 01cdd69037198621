/**
 * The heartbeat (core/sandboxes/heartbeat.ts) pings a quiet sandbox's agent less and less
 * often, down to once a minute, so that an idle sandbox costs nearly nothing. What it found
 * before it must still find: an agent that stops answering gets its sandbox declared dead
 * with the reason, also when it stops after the sandbox went quiet. (The disk limit is in
 * limits.test.ts, auto-hibernation and background commands in machine.test.ts.)
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
before(async () => {
  d = await startDaemon();
});
after(async () => {
  await stopAndCheckClean(d);
});

test('an agent that stops answering after the sandbox went quiet is found, and the sandbox declared dead', async () => {
  const sbx = await d.create();
  // Stops the agent 45 s from now, from a process the agent does not track (its own session,
  // no pipes to the agent), so no command counts as running: the sandbox goes quiet and its
  // pings back off before the agent hangs. A hostile root inside can do exactly this.
  const arm = await sbx.exec(['bash', '-c', 'setsid bash -c \'sleep 45; kill -STOP $(pgrep -f "agent.cjs serve")\' </dev/null >/dev/null 2>&1 &'], {
    user: 'root',
  });
  assert.equal(arm.exitCode, 0, arm.stderr);
  // Reading the record is no activity (only calls into the sandbox are): polling keeps it quiet.
  const info = await eventually(
    async () => {
      const r = await sbx.refresh();
      return r.state === 'dead' ? r : undefined;
    },
    // 45 s, then at most a minute to the next ping and three missed pings of 10 s each.
    180_000,
    'the hung sandbox declared dead',
    1000,
  );
  assert.match(info.error ?? '', /stopped responding/);
});
