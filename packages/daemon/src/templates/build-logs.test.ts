import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BuildLogs } from './build-logs.js';

test('a build log keeps its steps and output, and its name says how the build ended', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-build-logs-'));
  try {
    const logs = new BuildLogs(dir);
    const ok = logs.start('app');
    ok.write({ type: 'step', step: 1, total: 2, kind: 'run', description: 'run make', cached: false });
    ok.write({ type: 'log', step: 1, stream: 'stdout', line: 'compiling' });
    ok.write({ type: 'log', step: 1, stream: 'stderr', line: 'a warning' });
    ok.write({ type: 'step_done', step: 1, total: 2, cached: false, elapsedMs: 1500 });
    assert.equal(logs.list('app')[0]?.state, 'running');
    await ok.finish('abc123');
    await new Promise((r) => setTimeout(r, 2)); // ids sort by start time
    const failed = logs.start('app');
    failed.write({ type: 'error', code: 'failed_precondition', message: 'step 2 exited with 3', output: 'last line' });
    await failed.finish(undefined);

    const list = logs.list('app');
    assert.deepEqual(
      list.map((l) => [l.state, l.version]),
      [
        ['failed', undefined],
        ['ok', 'abc123'],
      ],
    );
    const text = (await logs.read('app', list[1]?.id ?? '')).text;
    assert.equal(text, '[1/2] run make\n  compiling\n! a warning\n  done in 1.5 s\n');
    assert.match((await logs.read('app', list[0]?.id ?? '')).text, /^failed: step 2 exited with 3\n {2}last line\n$/);
    await assert.rejects(logs.read('app', 'nope'), /no build log nope/);
    assert.deepEqual(logs.list('other'), []);
    logs.remove('app');
    assert.deepEqual(logs.list('app'), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('logs a crash cut short are marked failed at start; each template keeps its newest 20', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-build-logs-'));
  try {
    mkdirSync(path.join(dir, 'app'));
    writeFileSync(path.join(dir, 'app', '1700000000000-abcdef.running.log'), 'half a build\n');
    const logs = new BuildLogs(dir);
    logs.recover();
    assert.deepEqual(
      logs.list('app').map((l) => l.state),
      ['failed'],
    );
    for (let i = 0; i < 22; i++) await logs.start('app').finish(`v${i}`.replace(/\D/g, 'a'));
    assert.equal(readdirSync(path.join(dir, 'app')).length, 20);
    assert.equal(logs.list('app').filter((l) => l.state === 'failed').length, 0, 'the oldest went first');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a build that prints without end fills its log up to the cap, not the disk', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-build-logs-'));
  try {
    const logs = new BuildLogs(dir);
    const rec = logs.start('noisy');
    const line = 'x'.repeat(1000);
    for (let i = 0; i < 6000; i++) rec.write({ type: 'log', step: 1, stream: 'stdout', line });
    await rec.finish(undefined);
    const [only] = logs.list('noisy');
    const { text, bytes } = await logs.read('noisy', only?.id ?? '');
    assert.ok(bytes <= 4 * 1024 * 1024 + 100, `${bytes} bytes`);
    assert.match(text, /\[log truncated at 4194304 bytes\]\n$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
