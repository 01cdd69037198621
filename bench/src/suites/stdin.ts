/**
 * Streamed stdin: 100 MiB through `sbx.exec('cat > /dev/null', {stdin})` (what `warren exec
 * -i` does) vs the same bytes through a local pipe into `cat > /dev/null` on the host, and vs
 * raw runsc's own stdin (the channel without warren), all in the same run.
 */
import { spawn } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import type { Context } from '../context.js';
import { RawRunsc } from '../raw.js';
import { chunks } from './files.js';

const SUITE = 'stdin';
const SIZE = 100 * 1024 * 1024;
const MIB = SIZE / (1024 * 1024);

/** The host baseline: the bytes into a local `cat > /dev/null` through a pipe, until it exits. */
async function hostPipe(data: Buffer): Promise<number> {
  const t0 = performance.now();
  const cat = spawn('sh', ['-c', 'cat > /dev/null'], { stdio: ['pipe', 'ignore', 'inherit'] });
  const exited = new Promise<number | null>((resolve) => cat.on('exit', resolve));
  await pipeline(chunks(data), cat.stdin);
  const code = await exited;
  if (code !== 0) throw new Error(`host cat exited ${code}`);
  return performance.now() - t0;
}

export async function runStdin(ctx: Context): Promise<void> {
  const reps = ctx.iters.stdin;
  const data = Buffer.allocUnsafe(SIZE);
  randomFillSync(data);
  const { sbx, kill } = await ctx.sandbox();
  const viaExec: number[] = [];
  const host: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const r = await sbx.exec('cat > /dev/null; echo done', { stdin: chunks(data) });
    viaExec.push(performance.now() - t0);
    if (r.stdout !== 'done\n') throw new Error(`exec with stdin: ${JSON.stringify(r)}`);
    host.push(await hostPipe(data));
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  await kill();
  const raw = new RawRunsc(ctx);
  const rawIn: number[] = [];
  for (let i = 0; i < reps; i++) rawIn.push((await raw.stdioThroughput(SIZE)).inMs);

  const tput = (v: number[]) => v.map((t) => MIB / (t / 1000));
  const rows = [
    { key: 'host-pipe', label: 'host: 100 MiB → pipe → cat > /dev/null', values: tput(host), isBaseline: true },
    { key: 'raw-stdin-cat', label: 'raw runsc: 100 MiB host → sandbox stdin (node)', values: tput(rawIn), isBaseline: true },
    { key: 'exec-stdin', label: "exec('cat > /dev/null', {stdin: stream of 1 MiB chunks}), start to exit", values: tput(viaExec), baseline: 'host-pipe' },
    { key: 'exec-stdin-vs-raw', label: 'exec stdin vs raw runsc stdin', values: tput(viaExec), baseline: 'raw-stdin-cat' },
  ];
  for (const row of rows) ctx.report.add({ suite: SUITE, unit: 'MiB/s', higherIsBetter: true, ...row });
}
