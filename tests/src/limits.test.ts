/**
 * Resource limits are enforced, and a sandbox that blows through them fails its own command
 * or dies with a clear reason, while a neighbour sandbox and the daemon stay responsive.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, eventually, sleep, type DaemonHandle } from './harness.js';

let d: DaemonHandle;
let neighbour: Sandbox;
before(async () => {
  d = await startDaemon();
  neighbour = await d.create({ metadata: { role: 'neighbour' } });
});
after(async () => {
  await stopAndCheckClean(d);
});

/**
 * Runs exec('echo ok') on the neighbour and /v1/health every 500 ms; records the slowest.
 * The 500 ms is the sampling period while a hog runs, not a wait: stop() cuts the pause short.
 */
function watchNeighbour(): { stop(): Promise<{ worst: number; failures: string[] }> } {
  let worst = 0;
  const failures: string[] = [];
  let running = true;
  let wake: () => void = () => undefined;
  const loop = (async () => {
    while (running) {
      const t0 = Date.now();
      try {
        const r = await neighbour.exec('echo ok');
        if (r.stdout !== 'ok\n') failures.push(`neighbour said ${JSON.stringify(r.stdout)}`);
        await d.http.json('GET', '/v1/health');
      } catch (err) {
        failures.push((err as Error).message);
      }
      worst = Math.max(worst, Date.now() - t0);
      if (!running) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 500);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  })();
  return {
    async stop() {
      running = false;
      wake();
      await loop;
      return { worst, failures };
    },
  };
}

/** Either the command failed, or the sandbox died and said why. */
async function assertContained(sbx: Sandbox, outcome: { exitCode?: number | null; timedOut?: boolean } | Error, reason: RegExp): Promise<void> {
  if (outcome instanceof Error) {
    assert.match(outcome.message, reason, 'the caller learns why the sandbox died');
    const info = await sbx.refresh();
    assert.equal(info.state, 'dead');
    assert.match(info.error ?? '', reason);
  } else {
    assert.ok(outcome.timedOut || outcome.exitCode !== 0, `the runaway command must fail, got ${JSON.stringify(outcome)}`);
  }
}

/** A fork bomb under a cap of 128 processes presses against it from here on (it sits at 128 or 129). */
const BOMB_AT_CAP = 120;

/** Counts the processes of the sandbox's default user, as root: the cap is per user, so root can still look. */
const COUNT_USER_PROCESSES = 'ps -u user --no-headers | wc -l';

test('memory limit is enforced and a memory hog is contained', async () => {
  const hog = await d.create({ resources: { memoryMB: 256 } });
  const total = await hog.exec("awk '/MemTotal/ {print $2}' /proc/meminfo");
  assert.ok(Number(total.stdout) <= 256 * 1024, `the sandbox sees at most 256 MB, saw ${total.stdout.trim()} kB`);
  const watch = watchNeighbour();
  // python fails its own allocation; node touches pages until the sandbox runs out.
  const py = await hog.exec('python3 -c "a=[]\nwhile True: a.append(bytearray(16*1024*1024))"', { timeoutSeconds: 60 }).catch((e: Error) => e);
  await assertContained(hog, py, /out of memory/);
  const alive = (await hog.refresh()).state === 'running';
  if (alive) {
    const js = await hog.exec('node -e "const a=[]; for(;;) a.push(Buffer.alloc(16*1024*1024, 1))"', { timeoutSeconds: 60 }).catch((e: Error) => e);
    await assertContained(hog, js, /out of memory/);
  }
  const { worst, failures } = await watch.stop();
  assert.deepEqual(failures, [], 'the neighbour and the daemon kept answering');
  assert.ok(worst < 10_000, `the neighbour answered within 10 s at worst (took ${worst} ms)`);
  await hog.kill();
});

test('process limit is enforced and a fork bomb is contained', async () => {
  const bomb = await d.create({ resources: { pids: 128, memoryMB: 1024 } });
  const watch = watchNeighbour();
  const handle = await bomb.exec(':(){ :|:& };:; sleep 600', { background: true, tag: 'bomb' });
  // The bomb has done its worst once it presses against the cap: this command returns then,
  // with the count, or fails with the sandbox if the bomb takes it down. (Under gVisor the bomb
  // takes several seconds to get there, and commands crawl meanwhile.)
  const peak = await bomb
    .exec(`until [ "$(${COUNT_USER_PROCESSES})" -ge ${BOMB_AT_CAP} ]; do sleep 0.1; done; ${COUNT_USER_PROCESSES}`, { user: 'root', timeoutSeconds: 60 })
    .catch((err: Error) => err);
  const info = await bomb.refresh();
  if (info.state === 'dead') {
    assert.match(info.error ?? '', /out of memory|too many processes/, 'a dead sandbox says why');
  } else {
    assert.ok(
      !(peak instanceof Error) && peak.exitCode === 0,
      `the bomb did not reach ${BOMB_AT_CAP} processes: ${peak instanceof Error ? peak.message : JSON.stringify(peak)}`,
    );
    // +1: a process that is exiting can still be listed for a moment.
    assert.ok(Number(peak.stdout) <= 129, `at most 128 processes for the user, saw ${peak.stdout.trim()}`);
    // Signals reach the command's whole process group, so the bomb can be stopped.
    await handle.kill();
    await eventually(
      async () => Number((await bomb.exec(COUNT_USER_PROCESSES, { user: 'root' })).stdout) <= 2,
      15_000,
      'the bomb to be gone (at most 2 processes of the user left)',
    );
    const ok = await bomb.exec('echo usable again');
    assert.equal(ok.stdout, 'usable again\n');
  }
  const { worst, failures } = await watch.stop();
  assert.deepEqual(failures, []);
  assert.ok(worst < 10_000, `the neighbour answered within 10 s at worst (took ${worst} ms)`);
  await bomb.kill();
});

test('cpu limit: a sandbox with 1 cpu cannot use more than one core', async () => {
  const sbx = await d.create({ resources: { cpus: 1 } });
  // gVisor's own CPU clocks are virtual, so measure from the host: the sandbox's cgroup.
  const cgroup = (controller: string, file: string) => readFileSync(`/sys/fs/cgroup/${controller}/warren/${sbx.id}/${file}`, 'utf8').trim();
  assert.equal(cgroup('cpu', 'cpu.cfs_quota_us'), '100000');
  assert.equal(cgroup('cpu', 'cpu.cfs_period_us'), '100000');
  const before = Number(cgroup('cpuacct', 'cpuacct.usage'));
  const t0 = Date.now();
  const r = await sbx.exec('for i in 1 2 3; do timeout 3 sh -c "while :; do :; done" & done; wait', { timeoutSeconds: 60 });
  const wallSeconds = (Date.now() - t0) / 1000;
  const cpuSeconds = (Number(cgroup('cpuacct', 'cpuacct.usage')) - before) / 1e9;
  assert.equal(r.exitCode, 0, r.stderr);
  assert.ok(cpuSeconds / wallSeconds < 1.25, `three spinners under a 1-cpu quota used ${cpuSeconds.toFixed(2)} CPU-s in ${wallSeconds.toFixed(2)} s`);
  assert.ok(Number(/nr_throttled (\d+)/.exec(cgroup('cpu', 'cpu.stat'))?.[1]) > 0, 'the quota throttled the sandbox');
  await sbx.kill();
});

// Writes to the root filesystem count against diskMB (/tmp is gVisor's in-memory tmpfs and
// counts against memory instead).
test('disk limit: a sandbox that writes more than diskMB is stopped and says why', async () => {
  // The heartbeat checks each sandbox once every 5 s, each at its own point in the interval:
  // once the one over its limit is stopped, waiting one more interval (and a margin) makes
  // sure a check has passed over the other (heartbeats leave no other trace).
  const [sbx, over] = await Promise.all([d.create({ resources: { diskMB: 64 } }), d.create({ resources: { diskMB: 64 } })]);
  const small = await sbx.exec('head -c 16M /dev/urandom > ok.bin && rm ok.bin && echo fine');
  assert.equal(small.stdout, 'fine\n', 'writing within the limit works');
  await over.exec('head -c 100M /dev/urandom > big.bin').catch(() => undefined);
  const info = await eventually(
    async () => {
      const i = await over.refresh();
      return i.state === 'dead' ? i : undefined;
    },
    30_000,
    'the sandbox to be stopped for exceeding its disk limit',
  );
  assert.match(info?.error ?? '', /disk limit exceeded/);
  await sleep(6_000);
  assert.equal((await sbx.exec('echo still here')).stdout, 'still here\n');
  assert.equal((await sbx.refresh()).state, 'running', 'a heartbeat passed; data written within the limit, then deleted, does not stop the sandbox');
  await Promise.all([sbx.kill(), over.kill()]);
});
