/**
 * Keystroke echo latency through a terminal (docs/terminals.md): write one byte on the
 * WebSocket, time until the terminal echoes it back, against floors measured in the same run:
 * a pipe round trip inside the sandbox (python writing a byte to `cat` and reading it back),
 * the same through a pseudo-terminal inside (python's pty module, no warren in the path), and
 * the existing process stdin path (a background `cat`: POST stdin, its output followed).
 */
import type { Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'terminal';

/** Times `n` one-byte round trips inside the sandbox: through a pipe to cat, and through a pty. */
const INSIDE = String.raw`
import json, os, pty, subprocess, sys, time, tty
n = int(sys.argv[1])
def rounds(write, read):
    out = []
    for i in range(n + 10):
        t0 = time.perf_counter()
        write(b"x")
        got = b""
        while not got:
            got = read()
        if i >= 10:
            out.append((time.perf_counter() - t0) * 1000)
    return out
p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
pipe = rounds(lambda b: p.stdin.write(b), lambda: p.stdout.read(1))
p.kill()
pid, fd = pty.fork()
if pid == 0:
    os.execvp("cat", ["cat"])
time.sleep(0.2)
ptyrt = rounds(lambda b: os.write(fd, b), lambda: os.read(fd, 64))
os.kill(pid, 9)
print(json.dumps({"pipe": pipe, "pty": ptyrt}))
`;

/**
 * The terminal: cat on a pty (echo on), one byte per keystroke through the SDK's WebSocket,
 * each echo timed; the first `warmup` are left out.
 */
export async function terminalEchoes(sbx: Sandbox, n: number, warmup: number): Promise<number[]> {
  let echo: (() => void) | undefined;
  const term = await sbx.pty.create({ cmd: ['cat'], onData: () => echo?.() });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const out: number[] = [];
  for (let i = 0; i < n + warmup; i++) {
    const echoed = new Promise<void>((resolve) => (echo = resolve));
    const t0 = performance.now();
    term.write('x');
    await echoed;
    if (i >= warmup) out.push(performance.now() - t0);
  }
  echo = undefined;
  await term.kill();
  await term.wait();
  return out;
}

export async function runTerminal(ctx: Context): Promise<void> {
  const n = ctx.iters.terminal;
  const { sbx, kill } = await ctx.sandbox();

  const inside = await sbx.exec(['python3', '-c', INSIDE, String(n)], { timeoutSeconds: 300 });
  if (inside.exitCode !== 0) throw new Error(`in-sandbox round trips exited ${inside.exitCode}: ${inside.stderr.slice(-1000)}`);
  const floors = JSON.parse(inside.stdout) as { pipe: number[]; pty: number[] };

  // The process stdin path: a background cat, stdin by POST, its output followed as NDJSON.
  let waiting: (() => void) | undefined;
  const cat = await sbx.exec(['cat'], { background: true, keepStdinOpen: true });
  const following = cat.wait({ onStdout: () => waiting?.() });
  const stdinRt: number[] = [];
  for (let i = 0; i < n + 10; i++) {
    const echoed = new Promise<void>((resolve) => (waiting = resolve));
    const t0 = performance.now();
    await cat.sendStdin('x');
    await echoed;
    if (i >= 10) stdinRt.push(performance.now() - t0);
  }
  await cat.kill();
  await following.catch(() => undefined);

  const termRt = await terminalEchoes(sbx, n, 10);
  await kill();

  const r = ctx.report;
  r.add({ key: 'sbx-pipe-rt', suite: SUITE, label: 'in sandbox: 1 byte to cat and back (pipe; floor)', unit: 'ms', values: floors.pipe, isBaseline: true });
  r.add({
    key: 'sbx-pty-rt',
    suite: SUITE,
    label: 'in sandbox: 1 byte to cat on a pty and its echo',
    unit: 'ms',
    values: floors.pty,
    baseline: 'sbx-pipe-rt',
    note: "python's pty module inside: the Sentry's line discipline, no warren in the path",
  });
  r.add({
    key: 'stdin-cat-rt',
    suite: SUITE,
    label: 'process stdin: POST 1 byte to a background cat, output followed',
    unit: 'ms',
    values: stdinRt,
    baseline: 'sbx-pipe-rt',
  });
  r.add({
    key: 'term-echo',
    suite: SUITE,
    label: 'terminal: 1 keystroke on the WebSocket → its echo',
    unit: 'ms',
    values: termRt,
    baseline: 'sbx-pipe-rt',
    note: 'client → daemon → agent → warren-pty → pty → back',
  });
  const over = r.p50('term-echo') - r.p50('sbx-pipe-rt');
  r.target(
    'terminal keystroke echo p50 ≤ in-sandbox pipe round trip p50 + 10 ms',
    over <= 10,
    `${r.p50('term-echo').toFixed(2)} ms vs floor ${r.p50('sbx-pipe-rt').toFixed(2)} ms (${over >= 0 ? '+' : ''}${over.toFixed(2)} ms); in-sandbox pty ${r.p50('sbx-pty-rt').toFixed(2)} ms; process stdin path ${r.p50('stdin-cat-rt').toFixed(2)} ms`,
  );
}
