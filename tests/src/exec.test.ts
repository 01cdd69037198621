/** Command execution through the SDK: shells and argv, users, cwd, env, stdin, exits, timeouts, streaming, bad input. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { CommandError, InvalidArgumentError, TooLargeError, type Sandbox } from '@warren/sdk';
import { startDaemon, stopAndCheckClean, eventually, type DaemonHandle } from './harness.js';

// A hang (a lost exit event, a dead guest channel) must fail one test, not stall the suite.
const T = { timeout: 60_000 };

let d: DaemonHandle;
let sbx: Sandbox;
before(async () => {
  d = await startDaemon();
  sbx = await d.create({ env: { FROM_CREATE: 'create-value', OVERRIDDEN: 'create' } });
});
after(async () => {
  await stopAndCheckClean(d);
});

/** A name no other test (or earlier run) uses, for marker files and process arguments. */
function unique(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

test('a shell string runs in bash: pipes, &&, variables and bash syntax', T, async () => {
  const r = await sbx.exec('echo hello world | tr a-z A-Z && X=42 && echo "x=$X" && [[ abc == a* ]] && echo "$HOME"');
  assert.equal(r.stderr, '');
  assert.equal(r.stdout, 'HELLO WORLD\nx=42\n/home/user\n');
  assert.equal(r.exitCode, 0);
  assert.equal(r.timedOut, false);
  assert.ok(r.pid > 0);
  const failed = await sbx.exec('false && echo not-printed; echo after');
  assert.equal(failed.stdout, 'after\n');
});

test('an argv array runs without a shell: $VAR, globs and pipes stay literal', T, async () => {
  const r = await sbx.exec(['echo', '$HOME', '*', 'a|b', '$(id)']);
  assert.equal(r.stdout, '$HOME * a|b $(id)\n');
  assert.equal(r.exitCode, 0);
  const spaced = await sbx.exec(['printf', '[%s]\n', 'one arg with spaces', '']);
  assert.equal(spaced.stdout, '[one arg with spaces]\n[]\n');
});

test('the default user is `user` (uid 1000) with HOME and cwd /home/user', T, async () => {
  const r = await sbx.exec('id -u; id -un; echo "$HOME"; pwd; echo "$USER"');
  assert.equal(r.stdout, '1000\nuser\n/home/user\n/home/user\nuser\n');
  const argv = await sbx.exec(['pwd']);
  assert.equal(argv.stdout, '/home/user\n');
});

test("user: 'root' runs as uid 0 with HOME /root", T, async () => {
  const r = await sbx.exec('id -u; id -un; echo "$HOME"; pwd', { user: 'root' });
  assert.equal(r.stdout, '0\nroot\n/root\n/root\n');
  // root can do what user cannot, so the identity is real, not just the variables.
  const denied = await sbx.exec('touch /etc/warren-root-test');
  assert.notEqual(denied.exitCode, 0);
  assert.match(denied.stderr, /Permission denied/);
  const allowed = await sbx.exec('touch /etc/warren-root-test && stat -c %u /etc/warren-root-test', { user: 'root' });
  assert.equal(allowed.stdout, '0\n');
});

test('cwd: absolute, and relative to /home/user', T, async () => {
  assert.equal((await sbx.exec('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
  assert.equal((await sbx.exec(['pwd'], { cwd: '/usr/share' })).stdout, '/usr/share\n');
  const dir = unique('proj');
  await sbx.exec(`mkdir -p ${dir}/sub`, { check: true });
  assert.equal((await sbx.exec('pwd', { cwd: `${dir}/sub` })).stdout, `/home/user/${dir}/sub\n`);
  assert.equal((await sbx.exec(['pwd'], { cwd: dir })).stdout, `/home/user/${dir}\n`);
});

test('cwd that does not exist: 400 naming it, and the sandbox keeps working', T, async () => {
  await assert.rejects(sbx.exec('pwd', { cwd: '/no/such/dir' }), (e: Error) => e instanceof InvalidArgumentError && /\/no\/such\/dir/.test(e.message));
  await assert.rejects(
    sbx.exec(['pwd'], { cwd: 'missing-relative' }),
    (e: Error) => e instanceof InvalidArgumentError && /\/home\/user\/missing-relative/.test(e.message),
  );
  await assert.rejects(sbx.exec('pwd', { cwd: '/etc/hostname' }), (e: Error) => e instanceof InvalidArgumentError && /not a directory/.test(e.message));
  const r = await sbx.exec('echo still-alive');
  assert.equal(r.stdout, 'still-alive\n');
});

test('env given at create and per exec; per-exec env wins and does not persist', T, async () => {
  const r = await sbx.exec('echo "$FROM_CREATE|$OVERRIDDEN|$PER_EXEC"', { env: { PER_EXEC: 'exec-value', OVERRIDDEN: 'exec' } });
  assert.equal(r.stdout, 'create-value|exec|exec-value\n');
  const next = await sbx.exec('echo "$FROM_CREATE|$OVERRIDDEN|${PER_EXEC-unset}"');
  assert.equal(next.stdout, 'create-value|create|unset\n');
  const argv = await sbx.exec(['printenv', 'PER_EXEC', 'FROM_CREATE'], { env: { PER_EXEC: 'argv value with $dollar' } });
  assert.equal(argv.stdout, 'argv value with $dollar\ncreate-value\n');
  const root = await sbx.exec('echo "$FROM_CREATE"', { user: 'root' });
  assert.equal(root.stdout, 'create-value\n');
});

test("commands start with glibc's malloc tunables (docs/performance.md), and an empty GLIBC_TUNABLES opts out", T, async () => {
  // Asks glibc's own loader which values it took, rather than reading the variable back.
  const tunables = "/lib64/ld-linux-x86-64.so.2 --list-tunables | grep -E 'glibc.malloc.(mmap_threshold|trim_threshold|top_pad):' | sort";
  const r = await sbx.exec(tunables, { check: true });
  assert.match(r.stdout, /glibc\.malloc\.mmap_threshold: 0x400000 /);
  assert.match(r.stdout, /glibc\.malloc\.top_pad: 0x1000000 /);
  assert.match(r.stdout, /glibc\.malloc\.trim_threshold: 0x4000000 /);
  const off = await sbx.exec(tunables, { check: true, env: { GLIBC_TUNABLES: '' } });
  assert.match(off.stdout, /glibc\.malloc\.mmap_threshold: 0x0 /);
});

test('stdin text is delivered and then closed', T, async () => {
  const r = await sbx.exec('cat', { stdin: 'line one\nline two\n' });
  assert.equal(r.stdout, 'line one\nline two\n');
  const argv = await sbx.exec(['wc', '-l'], { stdin: 'a\nb\nc\n' });
  assert.equal(argv.stdout.trim(), '3');
  const unicode = await sbx.exec(['cat'], { stdin: 'grüße ✓\n' });
  assert.equal(unicode.stdout, 'grüße ✓\n');
  // Without stdin the command sees EOF at once instead of hanging.
  const none = await sbx.exec('cat; echo eof');
  assert.equal(none.stdout, 'eof\n');
});

test('stdin of several MiB is delivered whole', T, async () => {
  const line = 'abcdefghijklmnopqrstuvwxyz0123456789\n';
  const text = line.repeat(Math.ceil((3 * 1024 * 1024) / line.length));
  const r = await sbx.exec('wc -c; echo done', { stdin: text });
  assert.equal(r.stdout, `${Buffer.byteLength(text)}\ndone\n`);
  assert.equal(r.exitCode, 0);
  assert.equal((await sbx.exec('echo alive')).stdout, 'alive\n');
});

test("ls -l lists the template's symlinks without errors", T, async () => {
  // The gofer answered getxattr on a symlink with EBADF (patches/gvisor/0002-*), and ls
  // printed "Bad file descriptor" for each; /bin is a symlink of the template's rootfs.
  const r = await sbx.exec('ls -la /bin /usr/bin/awk', { cwd: '/home/user' });
  assert.equal(r.stderr, '');
  assert.equal(r.exitCode, 0);
  assert.match(r.stdout, /\/bin -> usr\/bin/);
});

test('non-zero exit codes come back', T, async () => {
  assert.equal((await sbx.exec('exit 3')).exitCode, 3);
  assert.equal((await sbx.exec(['false'])).exitCode, 1);
  const r = await sbx.exec(['bash', '-c', 'echo partial; exit 200']);
  assert.equal(r.exitCode, 200);
  assert.equal(r.stdout, 'partial\n');
  assert.equal(r.signal, undefined);
});

test('a command killed by a signal reports the signal', T, async () => {
  const r = await sbx.exec('echo before; kill -KILL $$; echo after');
  assert.equal(r.signal, 'SIGKILL');
  assert.equal(r.exitCode, 128 + 9, 'exit code follows the shell convention 128 + signal number');
  assert.equal(r.stdout, 'before\n');
  assert.equal(r.timedOut, false);
  const term = await sbx.exec(['sh', '-c', 'kill -TERM $$; sleep 5']);
  assert.equal(term.signal, 'SIGTERM');
  assert.equal(term.exitCode, 128 + 15);
});

test('stdout and stderr are kept apart', T, async () => {
  const r = await sbx.exec('echo out1; echo err1 >&2; echo out2; echo err2 >&2');
  assert.equal(r.stdout, 'out1\nout2\n');
  assert.equal(r.stderr, 'err1\nerr2\n');
});

test('large output (> 1 MiB) comes back whole', T, async () => {
  const r = await sbx.exec('seq 1 300000; seq 1 1000 >&2');
  const expected = Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join('');
  assert.ok(expected.length > 1024 * 1024);
  assert.equal(r.stdout.length, expected.length);
  assert.equal(r.stdout, expected);
  assert.equal(r.stderr.split('\n').length, 1001);
});

test('a timeout kills the whole process tree and returns the partial output', T, async () => {
  const marker = unique('t');
  const started = Date.now();
  // `exec -a` names the sleeps so ps can find exactly these, whoever else uses this sandbox.
  const r = await sbx.exec(`echo partial; echo to-stderr >&2; (exec -a ${marker}-bg sleep 1000) & (exec -a ${marker}-fg sleep 1000); echo never`, {
    timeoutSeconds: 2,
  });
  const elapsed = Date.now() - started;
  assert.equal(r.timedOut, true);
  assert.equal(r.stdout, 'partial\n');
  assert.equal(r.stderr, 'to-stderr\n');
  assert.notEqual(r.exitCode, 0);
  assert.ok(r.durationMs >= 1900, `durationMs ${r.durationMs} should cover the 2 s timeout`);
  assert.ok(elapsed < 30_000, `returned after ${elapsed} ms`);
  const leftovers = await eventually(
    async () => {
      const ps = await sbx.exec(['ps', '-eo', 'pid,args'], { check: true });
      assert.match(ps.stdout, /ps -eo pid,args/, 'ps lists processes');
      const left = ps.stdout.split('\n').filter((l) => l.includes(marker));
      return left.length === 0 ? 'none' : undefined;
    },
    10_000,
    'no process of the timed-out command to remain',
  );
  assert.equal(leftovers, 'none');
});

test('check: true throws CommandError with exitCode, stdout and stderr', T, async () => {
  const err = await sbx.exec('echo some-out; echo some-err >&2; exit 7', { check: true }).then(
    () => assert.fail('should throw'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof CommandError, `got ${String(err)}`);
  assert.equal(err.exitCode, 7);
  assert.equal(err.stdout, 'some-out\n');
  assert.equal(err.stderr, 'some-err\n');
  assert.equal(err.timedOut, false);
  assert.match(err.message, /exited with code 7/);
  assert.match(err.message, /some-err/);
  const timedOut = await sbx.exec('sleep 30', { check: true, timeoutSeconds: 1 }).then(
    () => assert.fail('should throw'),
    (e: unknown) => e,
  );
  assert.ok(timedOut instanceof CommandError);
  assert.equal(timedOut.timedOut, true);
  const ok = await sbx.exec(['echo', 'fine'], { check: true });
  assert.equal(ok.stdout, 'fine\n');
});

test('streaming callbacks receive output while the command still runs', T, async () => {
  // The command only finishes after the test has seen its first line and answered, so
  // this cannot pass unless output is delivered before exit.
  const go = `/tmp/${unique('go')}`;
  const chunks: string[] = [];
  const errChunks: string[] = [];
  let release: Promise<unknown> | undefined;
  const r = await sbx.exec(
    `echo first; echo first-err >&2; for i in $(seq 300); do if [ -e ${go} ]; then echo released; exit 0; fi; sleep 0.1; done; echo not-released; exit 1`,
    {
      onStdout: (data) => {
        chunks.push(data);
        if (!release && chunks.join('').includes('first\n')) release = sbx.exec(['touch', go], { check: true });
      },
      onStderr: (data) => errChunks.push(data),
    },
  );
  await release;
  assert.equal(r.stdout, 'first\nreleased\n');
  assert.equal(r.exitCode, 0);
  assert.equal(chunks.join(''), r.stdout);
  assert.equal(errChunks.join(''), 'first-err\n');
  assert.equal(r.stderr, 'first-err\n');
});

test('streaming: the first chunk arrives well before the result', T, async () => {
  let firstAt = 0;
  const r = await sbx.exec('echo one; sleep 3; echo two', {
    onStdout: () => {
      if (!firstAt) firstAt = Date.now();
    },
  });
  const doneAt = Date.now();
  assert.equal(r.stdout, 'one\ntwo\n');
  assert.ok(firstAt > 0);
  assert.ok(doneAt - firstAt >= 1500, `first chunk came only ${doneAt - firstAt} ms before the result`);
});

test('streaming keeps multi-byte characters whole across chunk boundaries', T, async () => {
  // 2- and 3-byte characters over many pipe reads and frames, so some end mid-character.
  const count = 300_000;
  const chunks: string[] = [];
  const r = await sbx.exec(`python3 -c "import sys; sys.stdout.write('é✓' * ${count})"`, { onStdout: (data) => chunks.push(data) });
  assert.ok(chunks.length > 1, 'output came in several chunks');
  assert.equal(r.stdout, 'é✓'.repeat(count));
  assert.equal(chunks.join(''), r.stdout);
  const plain = await sbx.exec(`python3 -c "import sys; sys.stdout.write('é✓' * ${count})"`);
  assert.equal(plain.stdout, 'é✓'.repeat(count));
});

test('a binary that does not exist: exit 127 naming it, like a shell (argv and cmd alike)', T, async () => {
  const argv = await sbx.exec(['no-such-binary-xyz', '--flag']);
  assert.equal(argv.exitCode, 127);
  assert.match(argv.stderr, /no-such-binary-xyz/);
  assert.match(argv.stderr, /not found/);
  assert.equal(argv.stdout, '');
  const abs = await sbx.exec(['/no/such/path/tool']);
  assert.equal(abs.exitCode, 127);
  assert.match(abs.stderr, /\/no\/such\/path\/tool/);
  const cmd = await sbx.exec('no-such-binary-xyz --flag');
  assert.equal(cmd.exitCode, 127);
  assert.match(cmd.stderr, /no-such-binary-xyz: command not found/);
  // A file that exists but is not executable is 126, as in a shell.
  const script = `/tmp/${unique('not-executable')}`;
  await sbx.exec(`printf 'echo ran\n' > ${script} && chmod 644 ${script}`, { check: true });
  const notExec = await sbx.exec([script]);
  assert.equal(notExec.exitCode, 126);
  assert.match(notExec.stderr, /Permission denied/);
  assert.equal(notExec.stdout, '');
  await assert.rejects(sbx.exec(['no-such-binary-xyz'], { check: true }), (e: Error) => e instanceof CommandError && e.exitCode === 127);
});

test('invalid input: 400 InvalidArgumentError', T, async () => {
  const route = `/v1/sandboxes/${sbx.id}/exec`;
  const bad = async (body: unknown, pattern: RegExp) => {
    await assert.rejects(d.http.json('POST', route, { json: body }), (e: Error) => {
      assert.ok(e instanceof InvalidArgumentError, `${JSON.stringify(body)}: got ${e.name}: ${e.message}`);
      assert.equal((e as InvalidArgumentError).status, 400);
      assert.match(e.message, pattern);
      return true;
    });
  };
  await bad({ cmd: 'echo a', argv: ['echo', 'b'] }, /exactly one of cmd or argv/);
  await bad({}, /exactly one of cmd or argv/);
  await bad({ argv: [] }, /argv/);
  await bad({ cmd: '' }, /cmd/);
  await bad({ cmd: 'id', user: 'Bad User!' }, /user/);
  await bad({ cmd: 'id', user: 'nosuchuser' }, /unknown user 'nosuchuser'/);
  await bad({ cmd: 'cat', keepStdinOpen: true }, /keepStdinOpen/);
  await bad({ cmd: 'id', timeoutSeconds: -1 }, /timeoutSeconds/);
  await bad({ cmd: 'id', bogus: 1 }, /bogus|unrecognized/i);
  await assert.rejects(sbx.exec('id', { user: 'nosuchuser' }), InvalidArgumentError);
  // None of that left a process behind or broke the sandbox.
  assert.equal((await sbx.exec('echo ok')).stdout, 'ok\n');
});

test('a request too large for the sandbox agent: 413, and the sandbox survives', T, async () => {
  const huge = 'x'.repeat(2 * 1024 * 1024);
  await assert.rejects(sbx.exec(`echo ${huge}`), (e: Error) => e instanceof TooLargeError && e.status === 413);
  await assert.rejects(sbx.exec(['echo', huge]), TooLargeError);
  // An environment that large is refused at the door (400 naming the limit), before the agent.
  const env = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`BIG_${i}`, 'y'.repeat(128 * 1024)]));
  await assert.rejects(sbx.exec('true', { env }), (e: Error) => e instanceof InvalidArgumentError && /env\.BIG_0 must be at most 131071 bytes/.test(e.message));
  assert.equal((await sbx.exec('echo alive')).stdout, 'alive\n');
});

test('concurrent execs in one sandbox each get their own output', T, async () => {
  const results = await Promise.all(Array.from({ length: 8 }, (_, i) => sbx.exec(`for j in 1 2 3; do echo ${i}-$j; done; exit ${i}`)));
  results.forEach((r, i) => {
    assert.equal(r.stdout, `${i}-1\n${i}-2\n${i}-3\n`);
    assert.equal(r.exitCode, i);
  });
  assert.equal(new Set(results.map((r) => r.pid)).size, results.length);
});

test('a silent command keeps its stream alive with keepalive lines', { timeout: 120_000 }, async () => {
  // Node's fetch drops a response after 300 s without bytes; keepalives every 20 s of
  // silence are what lets a long, quiet `npm test` finish through the SDK.
  const res = await fetch(`${d.url}/v1/sandboxes/${sbx.id}/exec?stream=1`, {
    method: 'POST',
    headers: { authorization: `Bearer ${d.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ cmd: 'sleep 23; echo done' }),
  });
  const lines = (await res.text())
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; data?: string });
  assert.deepEqual(
    lines.map((l) => l.type),
    ['start', 'keepalive', 'stdout', 'exit'],
  );
  assert.equal(lines[2]?.data, 'done\n');
});
