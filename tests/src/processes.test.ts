/** Background processes through the SDK: listing, output by offset, wait, stdin, signals, and lifetimes independent of requests. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import { ConflictError, InvalidArgumentError, NotFoundError, type ProcessInfo, type Sandbox } from '@warren/sdk';
import type { ExecStreamEvent } from '@warren/protocol';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

// A hang (a lost exit event, a dead guest channel) must fail one test, not stall the suite.
const T = { timeout: 90_000 };

let d: DaemonHandle;
let sbx: Sandbox;
before(async () => {
  d = await startDaemon();
  sbx = await d.create();
});
after(async () => {
  await stopAndCheckClean(d);
});

/** A marker file path no other test (or earlier run) uses. */
function marker(prefix: string): string {
  return `/tmp/${prefix}-${randomBytes(4).toString('hex')}`;
}

/** Shell that blocks until `file` exists (at most ~60 s, then fails loudly). */
function waitFor(file: string): string {
  return `for _ in $(seq 600); do [ -e ${file} ] && break; sleep 0.1; done; [ -e ${file} ] || { echo gave-up >&2; exit 99; }`;
}

async function info(pid: number): Promise<ProcessInfo | undefined> {
  return (await sbx.processes.list()).find((p) => p.pid === pid);
}

async function exited(pid: number): Promise<ProcessInfo> {
  const p = await eventually(
    async () => {
      const p = await info(pid);
      return p && !p.running ? p : undefined;
    },
    30_000,
    `process ${pid} to exit`,
  );
  return p!;
}

async function release(file: string): Promise<void> {
  await sbx.exec(['touch', file], { check: true });
}

test('background start with a tag: listed running, then exited with its exit code kept', T, async () => {
  const go = marker('bg');
  const h = await sbx.exec(`echo started; ${waitFor(go)}; echo done; exit 5`, { background: true, tag: 'my-job' });
  assert.ok(Number.isInteger(h.pid) && h.pid > 0);
  assert.equal(h.sandboxId, sbx.id);
  const running = await info(h.pid);
  assert.ok(running, 'listed right after start');
  assert.equal(running.tag, 'my-job');
  assert.equal(running.running, true);
  assert.equal(running.exitCode, null);
  assert.equal(running.endedAt, undefined);
  assert.ok(
    running.command.some((a) => a.includes('echo started')),
    `command ${JSON.stringify(running.command)}`,
  );
  assert.ok(!Number.isNaN(Date.parse(running.startedAt)));
  await release(go);
  const done = await exited(h.pid);
  assert.equal(done.exitCode, 5);
  assert.equal(done.tag, 'my-job');
  assert.equal(done.timedOut, false);
  assert.ok(done.endedAt && Date.parse(done.endedAt) >= Date.parse(done.startedAt));
  // The exit status stays: a later listing still has it.
  await sbx.exec('true');
  assert.equal((await info(h.pid))?.exitCode, 5);
  const out = await h.output();
  assert.equal(out.stdout, 'started\ndone\n');
  assert.equal(out.running, false);
  assert.equal(out.exitCode, 5);
});

test('output is kept when no one listens, including several MiB', T, async () => {
  const lines = 400_000;
  const h = await sbx.exec(`seq 1 ${lines}; seq 1 2000 >&2`, { background: true, tag: 'big' });
  await exited(h.pid);
  const expected = Array.from({ length: lines }, (_, i) => `${i + 1}\n`).join('');
  assert.ok(expected.length > 2 * 1024 * 1024);
  const out = await h.output();
  assert.equal(out.stdout.length, expected.length);
  assert.equal(out.stdout, expected);
  assert.equal(out.stdoutOffset, Buffer.byteLength(expected));
  assert.equal(out.stderr.split('\n').length, 2001);
  assert.equal(out.exitCode, 0);
  // wait() on a finished process replays everything too.
  const waited = await h.wait();
  assert.equal(waited.stdout, expected);
  assert.equal(waited.exitCode, 0);
  // The sandbox is still healthy afterwards.
  assert.equal((await sbx.exec('echo ok')).stdout, 'ok\n');
});

test('multi-byte output read back by pages and by wait() stays whole', T, async () => {
  const count = 400_000;
  const h = await sbx.exec(`python3 -c "import sys; sys.stdout.write('é✓' * ${count})"`, { background: true });
  await exited(h.pid);
  const out = await h.output();
  assert.equal(out.stdout, 'é✓'.repeat(count));
  assert.equal(out.stdoutOffset, 5 * count);
  const waited = await h.wait();
  assert.equal(waited.stdout, 'é✓'.repeat(count));
  // An offset in the middle of the output continues exactly there.
  const rest = await h.output({ stdoutOffset: 5 * (count - 5) });
  assert.equal(rest.stdout, 'é✓'.repeat(5));
});

test('output from offsets returns only newer bytes', T, async () => {
  const go = marker('off');
  const h = await sbx.exec(`echo first; echo err-first >&2; ${waitFor(go)}; echo second; echo err-second >&2`, { background: true });
  const early = (await eventually(
    async () => {
      const o = await h.output();
      return o.stdout === 'first\n' && o.stderr === 'err-first\n' ? o : undefined;
    },
    20_000,
    'first output',
  ))!;
  assert.equal(early.running, true);
  assert.equal(early.stdoutOffset, 'first\n'.length);
  assert.equal(early.stderrOffset, 'err-first\n'.length);
  const nothingNew = await h.output({ stdoutOffset: early.stdoutOffset, stderrOffset: early.stderrOffset });
  assert.equal(nothingNew.stdout, '');
  assert.equal(nothingNew.stderr, '');
  await release(go);
  await exited(h.pid);
  const later = await h.output({ stdoutOffset: early.stdoutOffset, stderrOffset: early.stderrOffset });
  assert.equal(later.stdout, 'second\n');
  assert.equal(later.stderr, 'err-second\n');
  assert.equal(later.stdoutOffset, 'first\nsecond\n'.length);
  assert.equal(later.running, false);
  const partial = await h.output({ stdoutOffset: 3 });
  assert.equal(partial.stdout, 'st\nsecond\n');
  assert.equal(partial.stderr, 'err-first\nerr-second\n');
  const beyond = await h.output({ stdoutOffset: 10_000 });
  assert.equal(beyond.stdout, '');
});

test('wait() streams output as it comes and returns the exit', T, async () => {
  const go = marker('wait');
  const h = await sbx.exec(`echo one; ${waitFor(go)}; echo two; echo problem >&2; exit 4`, { background: true });
  const chunks: string[] = [];
  const errs: string[] = [];
  let released: Promise<void> | undefined;
  // The process only goes on after wait() has delivered its first line.
  const r = await h.wait({
    onStdout: (data) => {
      chunks.push(data);
      if (!released && chunks.join('').includes('one\n')) released = release(go);
    },
    onStderr: (data) => errs.push(data),
  });
  await released;
  assert.equal(r.exitCode, 4);
  assert.equal(r.stdout, 'one\ntwo\n');
  assert.equal(r.stderr, 'problem\n');
  assert.equal(chunks.join(''), 'one\ntwo\n');
  assert.equal(errs.join(''), 'problem\n');
  assert.equal(r.pid, h.pid);
  const fromOffset = await h.wait({ stdoutOffset: 'one\n'.length });
  assert.equal(fromOffset.stdout, 'two\n');
  assert.equal(fromOffset.exitCode, 4);
});

test('stdin kept open: sendStdin reaches the process, closeStdin ends it', T, async () => {
  const h = await sbx.exec(['python3', '-u', '-c', 'import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\nprint("eof")'], {
    background: true,
    keepStdinOpen: true,
    tag: 'upper',
  });
  await h.sendStdin('hello\n');
  // Delivered while stdin is still open, not only at close.
  await eventually(async () => (await h.output()).stdout === 'HELLO\n', 20_000, 'the first line to be echoed');
  assert.equal((await info(h.pid))?.running, true);
  await h.sendStdin('wor');
  await h.sendStdin('ld\n');
  await h.closeStdin();
  const r = await h.wait();
  assert.equal(r.stdout, 'HELLO\nWORLD\neof\n');
  assert.equal(r.exitCode, 0);
  await assert.rejects(h.sendStdin('late\n'), ConflictError);
});

test('stdin: cat gets text sent in pieces; writing after close or without keepStdinOpen is a conflict', T, async () => {
  const h = await sbx.exec('cat; echo cat-done', { background: true, keepStdinOpen: true });
  await h.sendStdin('part 1, ');
  await h.sendStdin('part 2\n');
  await h.closeStdin();
  await assert.rejects(h.sendStdin('more'), ConflictError);
  const r = await h.wait();
  assert.equal(r.stdout, 'part 1, part 2\ncat-done\n');
  const go = marker('closed');
  const closed = await sbx.exec(`cat; ${waitFor(go)}`, { background: true });
  await assert.rejects(closed.sendStdin('x'), ConflictError);
  await release(go);
  await exited(closed.pid);
});

test('stdin of several MiB through sendStdin is delivered whole', T, async () => {
  const h = await sbx.exec('wc -c', { background: true, keepStdinOpen: true });
  const piece = `${'x'.repeat(1024 * 1024 - 1)}\n`;
  await h.sendStdin(piece.repeat(3));
  await h.sendStdin('tail\n');
  await h.closeStdin();
  const r = await h.wait();
  assert.equal(r.stdout.trim(), String(3 * 1024 * 1024 + 5));
  const inline = await sbx.exec('wc -c', { background: true, stdin: piece.repeat(2) });
  assert.equal((await inline.wait()).stdout.trim(), String(2 * 1024 * 1024));
});

test('signals: SIGTERM and SIGKILL end a process; exitCode and signal say so', T, async () => {
  const term = await sbx.exec(['sleep', '1000'], { background: true });
  await term.signal('SIGTERM');
  const t = await term.wait();
  assert.equal(t.signal, 'SIGTERM');
  assert.equal(t.exitCode, 128 + 15);
  const listed = await exited(term.pid);
  assert.equal(listed.signal, 'SIGTERM');
  assert.equal(listed.exitCode, 128 + 15);

  const killed = await sbx.exec('sleep 1000', { background: true });
  await killed.kill();
  const k = await killed.wait();
  assert.equal(k.signal, 'SIGKILL');
  assert.equal(k.exitCode, 128 + 9);

  // A process that handles SIGTERM gets to clean up and choose its exit code.
  const trapper = await sbx.exec(`trap 'echo cleaning-up; exit 0' TERM; echo ready; while :; do sleep 0.1; done`, { background: true });
  await eventually(async () => (await trapper.output()).stdout.includes('ready'), 20_000, 'the trap to be installed');
  await trapper.signal('SIGTERM');
  const tr = await trapper.wait();
  assert.equal(tr.exitCode, 0);
  assert.equal(tr.signal, undefined);
  assert.equal(tr.stdout, 'ready\ncleaning-up\n');

  await assert.rejects(sbx.processes.get(trapper.pid).signal('SIGNOPE'), InvalidArgumentError);
});

test('a signal reaches the whole process group of a background command', T, async () => {
  const name = `grp-${randomBytes(4).toString('hex')}`;
  const h = await sbx.exec(`(exec -a ${name} sleep 1000) & (exec -a ${name} sleep 1000) & wait`, { background: true });
  await eventually(
    async () => (await sbx.exec(['ps', '-eo', 'args'])).stdout.split('\n').filter((l) => l.startsWith(name)).length === 2,
    20_000,
    'both children',
  );
  await h.kill();
  await exited(h.pid);
  await eventually(async () => !(await sbx.exec(['ps', '-eo', 'args'])).stdout.includes(name), 20_000, 'no child to remain');
});

test('a background timeout kills the process and marks it timedOut', T, async () => {
  const h = await sbx.exec('echo before; sleep 1000', { background: true, timeoutSeconds: 1 });
  const p = await exited(h.pid);
  assert.equal(p.timedOut, true);
  assert.equal(p.signal, 'SIGKILL');
  assert.equal((await h.output()).stdout, 'before\n');
  const r = await h.wait();
  assert.equal(r.timedOut, true);
});

test("a command's lifetime is not tied to the HTTP request that started it", T, async () => {
  const go = marker('abort');
  // node:http rather than fetch: the test hangs up the connection itself and watches it close.
  const req = http.request(`${d.url}/v1/sandboxes/${sbx.id}/exec?stream=1`, {
    method: 'POST',
    agent: false,
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/json' },
  });
  req.on('error', () => undefined); // the hang-up below cuts the response short
  req.end(JSON.stringify({ cmd: `echo started; ${waitFor(go)}; echo finished; exit 3` }));
  const [res] = (await once(req, 'response')) as [http.IncomingMessage];
  res.on('error', () => undefined);
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] ?? '', /ndjson/);
  const socket = req.socket!;
  // Read events until the command has certainly started, then hang up mid-stream.
  const events = await new Promise<ExecStreamEvent[]>((resolve, reject) => {
    const seen: ExecStreamEvent[] = [];
    let buffered = '';
    res.setEncoding('utf8');
    res.on('data', (text: string) => {
      buffered += text;
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const l of lines) if (l.trim()) seen.push(JSON.parse(l) as ExecStreamEvent);
      if (seen.some((e) => e.type === 'stdout' && e.data.includes('started'))) resolve(seen);
    });
    res.on('end', () => reject(new Error(`stream ended early after ${JSON.stringify(seen)}`)));
  });
  const [start] = events;
  assert.ok(start);
  assert.equal(start.type, 'start');
  const pid = (start as { pid: number }).pid;
  // The daemon's HTTP server keeps no half-open connection: it closes its side when the
  // client ends its own, in the handling that also stops the stream. Once the connection is
  // closed, the daemon has seen the hang-up; what it did about it reached the agent before
  // the calls below.
  const closed = once(socket, 'close', { signal: AbortSignal.timeout(15_000) });
  socket.end();
  await closed.catch(() => assert.fail('the daemon did not close the connection the client hung up within 15 s'));
  assert.equal((await info(pid))?.running, true, 'still running after the client left');
  await release(go);
  const p = await exited(pid);
  assert.equal(p.exitCode, 3);
  const out = await sbx.processes.get(pid).output();
  assert.equal(out.stdout, 'started\nfinished\n');
  // The daemon is fine after the hang-up: new streams work.
  const again = await sbx.exec('echo again', { onStdout: () => undefined });
  assert.equal(again.stdout, 'again\n');
});

test('unknown pid: 404 for output, wait, stdin and signal', T, async () => {
  const ghost = sbx.processes.get(999_999);
  // The message tells this apart from the 404 of a sandbox that is gone.
  const noProcess = (e: Error) => e instanceof NotFoundError && e.status === 404 && /no process with pid 999999/.test(e.message);
  await assert.rejects(ghost.output(), noProcess);
  await assert.rejects(ghost.wait(), noProcess);
  await assert.rejects(ghost.sendStdin('x'), noProcess);
  await assert.rejects(ghost.signal('SIGTERM'), noProcess);
  await assert.rejects(d.http.json('GET', `/v1/sandboxes/${sbx.id}/processes/abc/output`), InvalidArgumentError);
  await assert.rejects(d.http.json('GET', `/v1/sandboxes/${sbx.id}/processes/1/output`, { query: { stdoutOffset: -1 } }), InvalidArgumentError);
});

test('signal to a process that has exited: 409', T, async () => {
  const h = await sbx.exec('exit 0', { background: true });
  await exited(h.pid);
  await assert.rejects(h.signal('SIGTERM'), (e: Error) => e instanceof ConflictError && e.status === 409 && /already exited/.test(e.message));
  await assert.rejects(h.kill(), ConflictError);
});

test('a missing binary in the background: a process that exits 127', T, async () => {
  const h = await sbx.exec(['no-such-binary-xyz'], { background: true, tag: 'missing' });
  const p = await exited(h.pid);
  assert.equal(p.exitCode, 127);
  assert.match((await h.output()).stderr, /no-such-binary-xyz: not found/);
});

test('processes of foreground execs are listed too', T, async () => {
  const r = await sbx.exec('echo fg; exit 9');
  const p = await info(r.pid);
  assert.ok(p, 'a foreground exec is a tracked process');
  assert.equal(p.running, false);
  assert.equal(p.exitCode, 9);
  assert.equal(p.tag, undefined);
  assert.equal((await sbx.processes.get(r.pid).output()).stdout, 'fg\n');
});

test('finished processes hold no file descriptors in the agent', { timeout: 120_000 }, async () => {
  const count = async () => Number((await sbx.exec('ls /proc/$(pgrep -f "agent.cjs serve")/fd | wc -l', { user: 'root' })).stdout);
  const before = await count();
  for (let i = 0; i < 20; i++) await sbx.exec(['true']);
  const after = await count();
  assert.ok(after <= before + 2, `agent descriptors grew from ${before} to ${after} over 20 finished commands`);
  const old = await sbx.processes.list();
  const first = old.find((p) => !p.running && p.command.join(' ') === 'true');
  assert.ok(first, 'finished processes are still listed');
  assert.equal((await sbx.processes.get(first.pid).output()).exitCode, 0, 'and their output stays readable');
});
