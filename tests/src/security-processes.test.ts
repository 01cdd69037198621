/**
 * Security battery, processes (docs/security.md): a command that times out or is killed
 * takes every process it started with it, also those that called setsid or were reparented
 * by a double fork, and a fork bomb leaves the sandbox's process budget free again; and
 * what another user of the sandbox can see of a root command's environment.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

const T = { timeout: 180_000 };
let d: DaemonHandle | undefined;

before(async () => {
  d = await startDaemon();
});

after(async () => {
  await stopAndCheckClean(d);
});

/** Every process in the sandbox but init, the agent and the `ps` asking. */
async function strays(sbx: Sandbox): Promise<string[]> {
  const ps = await sbx.exec(['ps', '-eo', 'pid,ppid,sid,user,args', '--no-headers'], { user: 'root' });
  return ps.stdout.split('\n').filter((l) => l.trim() && !/warren-init|agent\.cjs serve|ps -eo/.test(l));
}

// Escapes every usual way: a new session, a double fork (reparented to init), nohup, disown.
const ESCAPERS = `(setsid sleep 1001 &); (sleep 1002 &) ; nohup sleep 1003 >/dev/null 2>&1 & (trap "" HUP TERM; exec sleep 1004) & disown; setsid -f sleep 1005`;

test('processes: a timed-out command takes every process it started, also after setsid, a double fork or nohup', T, async () => {
  const sbx = await d!.create();
  try {
    const r = await sbx.exec(`${ESCAPERS}; sleep 300`, { timeoutSeconds: 3 });
    assert.equal(r.timedOut, true);
    assert.deepEqual(await strays(sbx), []);
  } finally {
    await sbx.kill();
  }
});

test('processes: killing a background command takes every process it started', T, async () => {
  const sbx = await d!.create();
  try {
    const p = await sbx.exec(`${ESCAPERS}; sleep 300`, { background: true });
    await eventually(async () => (await strays(sbx)).filter((l) => /sleep 100[1-5]/.test(l)).length === 5, 20_000, 'the escapers running');
    await p.kill();
    await eventually(async () => (await strays(sbx)).length === 0, 10_000, `no process left (left: ${(await strays(sbx)).join('; ')})`);
    // A command that finished on its own keeps what it left running on purpose (a server).
    await sbx.exec('nohup sleep 1006 >/dev/null 2>&1 &', { check: true });
    assert.equal((await strays(sbx)).filter((l) => /sleep 1006/.test(l)).length, 1);
  } finally {
    await sbx.kill();
  }
});

test('processes: a fork bomb under a timeout leaves nothing behind and the sandbox can fork again', T, async () => {
  const sbx = await d!.create({ resources: { pids: 256 } });
  try {
    const r = await sbx.exec('bomb() { bomb | bomb & }; bomb; sleep 300', { timeoutSeconds: 5 });
    assert.equal(r.timedOut, true);
    assert.deepEqual(await strays(sbx), []);
    // Most of the budget is free: 150 processes at once start and finish.
    const many = await sbx.exec('for i in $(seq 150); do sleep 1 & done; wait; echo all', { timeoutSeconds: 60 });
    assert.equal(many.exitCode, 0, many.stderr);
    assert.equal(many.stdout, 'all\n');
  } finally {
    await sbx.kill();
  }
});

test('processes: a root command’s environment is readable by user (documented limit); a root-only file is the safe way to hand it a secret', T, async () => {
  const sbx = await d!.create();
  try {
    await sbx.exec(['sleep', '600'], { user: 'root', background: true, env: { WARREN_SECRET: 'in-the-environment' } });
    const pid = (await sbx.exec(['pgrep', '-u', 'root', '-x', 'sleep'], { check: true })).stdout.trim();
    // gVisor 20240729 makes /proc/PID/environ world-readable (Linux: 0400). If this starts
    // failing, gVisor fixed it: update the `user` option's docs and docs/security.md.
    const seen = await sbx.exec(['sh', '-c', `tr '\\0' '\\n' < /proc/${pid}/environ`]);
    assert.match(seen.stdout, /^WARREN_SECRET=in-the-environment$/m, 'the documented limit no longer holds');
    // The safe alternative: a file only root may read, read by the root command itself.
    await sbx.files.write('/root/secret', 'in-a-file\n', { user: 'root', mode: 0o600 });
    const root = await sbx.exec(['cat', '/root/secret'], { user: 'root' });
    assert.equal(root.stdout, 'in-a-file\n');
    const user = await sbx.exec(['cat', '/root/secret']);
    assert.notEqual(user.exitCode, 0);
    assert.match(user.stderr, /Permission denied/);
    await assert.rejects(sbx.files.readText('/root/secret'), /may not|permission/i);
  } finally {
    await sbx.kill();
  }
});
