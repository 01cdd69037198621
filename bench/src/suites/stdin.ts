/**
 * Streamed stdin: 100 MiB through `sbx.exec('cat > /dev/null', {stdin})` (what `warren exec
 * -i` does) vs the same bytes through a local pipe into `cat > /dev/null` on the host, and vs
 * raw runsc's own stdin (the channel without warren), all in the same run.
 */
import { spawn } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Context } from '../context.js';
import { RawRunsc } from '../raw.js';

const SUITE = 'stdin';
const SIZE = 100 * 1024 * 1024;
const MIB = SIZE / (1024 * 1024);
const CHUNK = 1024 * 1024;

function chunks(buf: Buffer): Readable {
  return Readable.from(
    (function* () {
      for (let at = 0; at < buf.length; at += CHUNK) yield buf.subarray(at, at + CHUNK);
    })(),
  );
}

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
  const r = ctx.report;
  r.add({
    key: 'host-pipe',
    suite: SUITE,
    label: 'host: 100 MiB → pipe → cat > /dev/null',
    unit: 'MiB/s',
    values: tput(host),
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'raw-stdin-cat',
    suite: SUITE,
    label: 'raw runsc: 100 MiB host → sandbox stdin (node)',
    unit: 'MiB/s',
    values: tput(rawIn),
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'exec-stdin',
    suite: SUITE,
    label: "exec('cat > /dev/null', {stdin: stream of 1 MiB chunks}), start to exit",
    unit: 'MiB/s',
    values: tput(viaExec),
    baseline: 'host-pipe',
    higherIsBetter: true,
  });
  r.add({
    key: 'exec-stdin-vs-raw',
    suite: SUITE,
    label: 'exec stdin vs raw runsc stdin',
    unit: 'MiB/s',
    values: tput(viaExec),
    baseline: 'raw-stdin-cat',
    higherIsBetter: true,
  });
}
