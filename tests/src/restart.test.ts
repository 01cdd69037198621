/**
 * Daemon restart: after kill -9 and a new start, running sandboxes are running and reachable
 * with their processes and files; sandboxes that died meanwhile are reported dead; runsc
 * containers the registry does not know are destroyed. State and reality agree.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, runscContainers, eventually, TEMPLATES, type DaemonHandle } from './harness.js';

let current: DaemonHandle | undefined;
after(async () => {
  await stopAndCheckClean(current);
});

/** A container started behind the daemon's back, under its runsc root. */
function startStrayContainer(home: string, id: string): void {
  const bundle = path.join(home, `stray-${id}`);
  mkdirSync(bundle, { recursive: true });
  execFileSync('runsc', ['spec', '--bundle', bundle, '--', '/bin/sleep', '1000']);
  const specPath = path.join(bundle, 'config.json');
  const spec = JSON.parse(execFileSync('cat', [specPath], { encoding: 'utf8' })) as {
    root: { path: string; readonly: boolean };
    process: { terminal: boolean };
  };
  spec.root = { path: path.join(TEMPLATES, 'base/current/rootfs'), readonly: true };
  spec.process.terminal = false;
  writeFileSync(specPath, JSON.stringify(spec));
  execFileSync('runsc', ['--root', path.join(home, 'runsc'), '--network', 'none', 'run', '--detach', '--bundle', bundle, id], { stdio: 'ignore' });
  execFileSync('rm', ['-rf', bundle]);
}

test('kill -9 of the daemon: a new daemon re-attaches, reports the dead, removes strays', async () => {
  const first = await startDaemon();
  current = first;
  const survivor = await first.create({ metadata: { role: 'survivor' } });
  await survivor.files.write('notes.txt', 'written before the crash\n');
  const counter = await survivor.exec(['bash', '-c', 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; echo tick $i; sleep 0.2; done'], {
    background: true,
    tag: 'counter',
  });
  const victim = await first.create({ metadata: { role: 'victim' } });
  await eventually(async () => Number((await survivor.files.readText('/tmp/counter')).trim()) > 2, 10_000, 'counter to start');

  await first.crash();
  // While the daemon is down: one sandbox dies, and a stranger appears.
  execFileSync('runsc', ['--root', path.join(first.home, 'runsc'), 'delete', '--force', victim.id]);
  startStrayContainer(first.home, 'stray1');
  assert.ok(runscContainers(first.home).includes('stray1'));

  const second = await startDaemon({ home: first.home });
  current = second;
  const again = await Sandbox.connect(survivor.id, second.conn);
  assert.equal(again.info.state, 'running');
  assert.equal(await again.files.readText('notes.txt'), 'written before the crash\n');
  const procs = await again.processes.list();
  const tagged = procs.find((p) => p.tag === 'counter');
  assert.ok(tagged, 'the background process is still known');
  assert.equal(tagged.pid, counter.pid);
  assert.equal(tagged.running, true);
  const c1 = Number((await again.files.readText('/tmp/counter')).trim());
  await eventually(async () => Number((await again.files.readText('/tmp/counter')).trim()) > c1, 10_000, 'counter to keep counting');
  const out = await again.processes.get(counter.pid).output();
  assert.match(out.stdout, /^tick 1\ntick 2\n/, 'output from before the restart is kept');
  const r = await again.exec('echo reachable');
  assert.equal(r.stdout, 'reachable\n');

  const dead = await Sandbox.connect(victim.id, second.conn);
  assert.equal(dead.info.state, 'dead');
  assert.match(dead.info.error ?? '', /stopped while the daemon was down/);
  await assert.rejects(dead.exec('true'), /dead/);

  assert.deepEqual(runscContainers(second.home).sort(), [survivor.id].sort(), 'only the known, running sandbox remains');

  // A graceful stop and start also keeps the sandbox.
  await second.stop();
  const third = await startDaemon({ home: first.home });
  current = third;
  const still = await Sandbox.connect(survivor.id, third.conn);
  assert.equal((await still.exec('cat notes.txt')).stdout, 'written before the crash\n');
  await still.kill();
  await (await Sandbox.connect(victim.id, third.conn)).kill();
  current = undefined;
  await stopAndCheckClean(third);
});

test('after a restart, a re-attached sandbox hibernates, resumes and forks with its state', async () => {
  const first = await startDaemon();
  current = first;
  const sbx = await first.create();
  await sbx.exec(['bash', '-c', 'echo before > /tmp/mark; (i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.2; done) >/dev/null 2>&1 &']);
  await eventually(async () => Number((await sbx.files.readText('/tmp/counter')).trim()) > 1, 10_000, 'counter to start');
  await first.crash();

  const second = await startDaemon({ home: first.home });
  current = second;
  const again = await Sandbox.connect(sbx.id, second.conn);
  // Its agent is now reached through a relay process: the image must not hold it.
  await again.hibernate();
  assert.equal((await again.refresh()).state, 'hibernated');
  assert.equal((await again.exec('cat /tmp/mark')).stdout, 'before\n');
  const c1 = Number((await again.files.readText('/tmp/counter')).trim());
  await eventually(async () => Number((await again.files.readText('/tmp/counter')).trim()) > c1, 10_000, 'counter to go on after the resume');

  const [child] = await again.forkTree(1);
  assert.equal((await child!.exec('cat /tmp/mark')).stdout, 'before\n');
  const c2 = Number((await child!.files.readText('/tmp/counter')).trim());
  await eventually(async () => Number((await child!.files.readText('/tmp/counter')).trim()) > c2, 10_000, 'counter to go on in the fork');
  // The parent kept its channel through the fork.
  assert.equal((await again.exec('echo parent')).stdout, 'parent\n');
  await child!.kill();
  await again.kill();
});
