/**
 * The Python SDK against the TS SDK on the same sandbox in the same run: the exec round trip
 * of `true` (argv, and a string run by bash -c) and a daemon-only call (refresh), one call of
 * each SDK in turn (which one goes first alternates), so drift on a busy machine hits both
 * alike. The Python side is one python3 process (bench/scripts/python-sdk.py) that warms
 * up, then makes one timed call per line it is sent and answers with its wall time.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { REPO } from '@warren/tests/harness';
import type { Sandbox } from '@warren/sdk';
import type { Context } from '../context.js';

const SUITE = 'python';
const WORKER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../scripts/python-sdk.py');
const PYTHON = process.env.PYTHON ?? 'python3';
/** How far behind the TS SDK the Python SDK may be (p50). */
const SLACK_MS = 2;

type Call = 'exec-argv' | 'exec-str' | 'refresh';

/** The python3 worker: `call(name)` has it make one call and returns its wall and CPU time in ms. */
class PythonWorker {
  private readonly lines: AsyncIterator<string>;
  private stderr = '';
  version = '';

  constructor(private readonly child: ChildProcessWithoutNullStreams) {
    this.lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    child.stderr.on('data', (b: Buffer) => {
      this.stderr += b.toString();
    });
    // No python3: the output ends at once and next() says why.
    child.on('error', (err) => {
      this.stderr += `${PYTHON}: ${err.message}`;
    });
  }

  static spawn(sbx: Sandbox, conn: { url: string; apiKey: string }): PythonWorker {
    const child = spawn(PYTHON, [WORKER, sbx.id], {
      env: { ...process.env, WARREN_URL: conn.url, WARREN_API_KEY: conn.apiKey, PYTHONPATH: path.join(REPO, 'packages/python'), PYTHONDONTWRITEBYTECODE: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    return new PythonWorker(child);
  }

  /** Waits until the worker has warmed up. */
  async ready(): Promise<void> {
    const { python } = await this.next();
    this.version = typeof python === 'string' ? python : '?';
  }

  private async next(): Promise<Record<string, unknown>> {
    const { value, done } = await this.lines.next();
    if (done) throw new Error(`the python worker ended: ${this.stderr.slice(-2000)}`);
    const msg = JSON.parse(value) as Record<string, unknown>;
    if (typeof msg.error === 'string') throw new Error(`the python worker failed: ${msg.error}\n${this.stderr.slice(-2000)}`);
    return msg;
  }

  async call(name: Call): Promise<{ ms: number; cpu: number }> {
    this.child.stdin.write(`${name}\n`);
    const { ms, cpu } = await this.next();
    return { ms: Number(ms), cpu: Number(cpu) };
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin.end();
    await exited;
  }
}

export async function runPython(ctx: Context): Promise<void> {
  const n = ctx.iters.python;
  const { sbx, kill } = await ctx.sandbox();
  const { conn } = await ctx.getDaemon();
  const worker = PythonWorker.spawn(sbx, conn);
  const stopWorker = ctx.defer('stop the python worker', () => worker.stop());
  await worker.ready();

  const ts: Record<Call, () => Promise<unknown>> = {
    'exec-argv': async () => {
      const r = await sbx.exec(['true']);
      if (r.exitCode !== 0) throw new Error(`exec(['true']) exited ${r.exitCode}: ${r.stderr}`);
    },
    'exec-str': async () => {
      const r = await sbx.exec('true');
      if (r.exitCode !== 0) throw new Error(`exec('true') exited ${r.exitCode}: ${r.stderr}`);
    },
    refresh: () => sbx.refresh(),
  };
  const calls = Object.keys(ts) as Call[];
  for (let i = 0; i < 10; i++) for (const c of calls) await ts[c](); // warm-up (the worker warmed up itself)

  const samples = { ts: {} as Record<Call, number[]>, py: {} as Record<Call, number[]> };
  for (const c of calls) [samples.ts[c], samples.py[c]] = [[], []];
  // The SDKs' own CPU per exec(['true']), which the daemon's and the sandbox's noise does not reach.
  const cpu = { ts: [] as number[], py: [] as number[] };
  for (let i = 0; i < n; i++) {
    for (const c of calls) {
      const timeTs = async () => {
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        await ts[c]();
        samples.ts[c].push(performance.now() - t0);
        const used = process.cpuUsage(c0);
        if (c === 'exec-argv') cpu.ts.push((used.user + used.system) / 1000);
      };
      const timePy = async () => {
        const { ms, cpu: used } = await worker.call(c);
        samples.py[c].push(ms);
        if (c === 'exec-argv') cpu.py.push(used);
      };
      if (i % 2 === 0) {
        await timeTs();
        await timePy();
      } else {
        await timePy();
        await timeTs();
      }
    }
  }
  await stopWorker();
  await kill();

  const r = ctx.report;
  const label: Record<Call, [ts: string, py: string]> = {
    'exec-argv': ["TS exec(['true']) round trip", `Python exec(["true"]) round trip (python ${worker.version})`],
    'exec-str': ["TS exec('true') (bash -c)", 'Python exec("true") (bash -c)'],
    refresh: ['TS refresh() (daemon only)', 'Python refresh() (daemon only)'],
  };
  for (const c of calls) {
    r.add({ key: `ts-${c}`, suite: SUITE, label: label[c][0], unit: 'ms', values: samples.ts[c], isBaseline: true });
    r.add({ key: `py-${c}`, suite: SUITE, label: label[c][1], unit: 'ms', values: samples.py[c], baseline: `ts-${c}` });
  }
  r.add({ key: 'ts-exec-cpu', suite: SUITE, label: "  TS SDK's CPU per exec(['true'])", unit: 'ms', values: cpu.ts, isBaseline: true });
  r.add({ key: 'py-exec-cpu', suite: SUITE, label: '  Python SDK\'s CPU per exec(["true"])', unit: 'ms', values: cpu.py, baseline: 'ts-exec-cpu' });
  for (const c of ['exec-argv', 'exec-str'] as const) {
    const [py, tsP50] = [r.p50(`py-${c}`), r.p50(`ts-${c}`)];
    r.target(
      `Python exec p50 ≤ TS exec p50 + ${SLACK_MS} ms (${c === 'exec-argv' ? "['true']" : "'true'"})`,
      py <= tsP50 + SLACK_MS,
      `${py.toFixed(2)} vs ${tsP50.toFixed(2)} ms (${py - tsP50 >= 0 ? '+' : ''}${(py - tsP50).toFixed(2)} ms)`,
    );
  }
}
