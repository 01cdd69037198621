/**
 * 100 MiB write then read through the SDK vs the same bytes through a 127.0.0.1 TCP socket
 * into and out of a host file (what the SDK → daemon leg costs with no sandbox behind it).
 */
import { randomFillSync } from 'node:crypto';
import { createReadStream, createWriteStream, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Context } from '../context.js';
import { RawRunsc } from '../raw.js';

const SUITE = 'files';
const SIZE = 100 * 1024 * 1024;
const MIB = SIZE / (1024 * 1024);
const CHUNK = 1024 * 1024;

/** `buf` as a stream of 1 MiB views (also the stdin suite's source). */
export function chunks(buf: Buffer): Readable {
  return Readable.from(
    (function* () {
      for (let at = 0; at < buf.length; at += CHUNK) yield buf.subarray(at, at + CHUNK);
    })(),
  );
}

async function drain(stream: Readable): Promise<number> {
  let n = 0;
  for await (const c of stream) n += (c as Buffer).length;
  return n;
}

/** One TCP server on 127.0.0.1 that either stores what it is sent or sends the stored file. */
async function socketBaseline(file: string, data: Buffer, reps: number): Promise<{ write: number[]; read: number[] }> {
  let mode: 'store' | 'send' = 'store';
  // Half-open, so that the server can acknowledge once the file is written and closed.
  const server = net.createServer({ allowHalfOpen: true }, (sock) => {
    if (mode === 'store') {
      const out = createWriteStream(file);
      sock.pipe(out);
      out.on('close', () => sock.end('k'));
      sock.on('error', () => out.destroy());
    } else {
      pipeline(createReadStream(file), sock).catch(() => sock.destroy());
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const write: number[] = [];
  const read: number[] = [];
  try {
    for (let i = 0; i < reps; i++) {
      mode = 'store';
      let t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        const sock = net.connect(port, '127.0.0.1');
        sock.on('error', reject);
        sock.on('data', () => undefined);
        sock.on('end', () => resolve()); // the server answers once the file is written
        chunks(data).pipe(sock);
      });
      write.push(performance.now() - t0);
      if (statSync(file).size !== SIZE) throw new Error('socket baseline stored the wrong size');
      mode = 'send';
      t0 = performance.now();
      const sock = net.connect(port, '127.0.0.1');
      const got = await drain(sock);
      read.push(performance.now() - t0);
      if (got !== SIZE) throw new Error(`socket baseline read ${got} bytes`);
    }
  } finally {
    server.close();
    rmSync(file, { force: true });
  }
  return { write, read };
}

export async function runFiles(ctx: Context): Promise<void> {
  const reps = ctx.iters.files;
  const data = Buffer.allocUnsafe(SIZE);
  randomFillSync(data);
  const { sbx, kill } = await ctx.sandbox();
  const target = '/home/user/bench-100MiB.bin';
  const writeBuf: number[] = [];
  const writeStream: number[] = [];
  const read: number[] = [];
  const writeWith = async (kind: 'buffer' | 'stream') => {
    const t0 = performance.now();
    const w = await sbx.files.write(target, kind === 'buffer' ? data : chunks(data));
    (kind === 'buffer' ? writeBuf : writeStream).push(performance.now() - t0);
    if (w.size !== SIZE) throw new Error(`files.write (${kind}) stored ${w.size} bytes`);
  };
  for (let i = 0; i < reps; i++) {
    // Alternate which write goes first, so neither always meets a fresh (or a replaced) file.
    await writeWith(i % 2 ? 'stream' : 'buffer');
    const t0 = performance.now();
    const got = await drain(await sbx.files.readStream(target));
    read.push(performance.now() - t0);
    if (got !== SIZE) throw new Error(`readStream gave ${got} bytes`);
    await writeWith(i % 2 ? 'buffer' : 'stream');
    process.stdout.write('.');
  }
  process.stdout.write('\n');
  await sbx.files.remove(target);
  await kill();

  const base = await socketBaseline(path.join(ctx.tmp('files'), 'socket.bin'), data, reps);
  const raw = new RawRunsc(ctx);
  const rawIn: number[] = [];
  const rawOut: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t = await raw.stdioThroughput(SIZE);
    rawIn.push(t.inMs);
    rawOut.push(t.outMs);
  }

  const tput = (v: number[]) => v.map((t) => MIB / (t / 1000));
  const r = ctx.report;
  r.add({
    key: 'host-socket-write',
    suite: SUITE,
    label: 'host: 100 MiB → 127.0.0.1 socket → file',
    unit: 'MiB/s',
    values: tput(base.write),
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'host-socket-read',
    suite: SUITE,
    label: 'host: file → 127.0.0.1 socket, 100 MiB',
    unit: 'MiB/s',
    values: tput(base.read),
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'raw-stdin',
    suite: SUITE,
    label: 'raw runsc: 100 MiB host → sandbox stdin (node)',
    unit: 'MiB/s',
    values: tput(rawIn),
    isBaseline: true,
    higherIsBetter: true,
    note: 'the channel the daemon writes files through, without warren',
  });
  r.add({
    key: 'raw-stdout',
    suite: SUITE,
    label: 'raw runsc: 100 MiB sandbox stdout → host (node)',
    unit: 'MiB/s',
    values: tput(rawOut),
    isBaseline: true,
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-write-buffer',
    suite: SUITE,
    label: 'files.write(Buffer 100 MiB)',
    unit: 'MiB/s',
    values: tput(writeBuf),
    baseline: 'host-socket-write',
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-write-stream',
    suite: SUITE,
    label: 'files.write(stream of 1 MiB chunks)',
    unit: 'MiB/s',
    values: tput(writeStream),
    baseline: 'host-socket-write',
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-read-stream',
    suite: SUITE,
    label: 'files.readStream 100 MiB',
    unit: 'MiB/s',
    values: tput(read),
    baseline: 'host-socket-read',
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-write-buffer-vs-raw',
    suite: SUITE,
    label: 'files.write(Buffer) vs raw stdin',
    unit: 'MiB/s',
    values: tput(writeBuf),
    baseline: 'raw-stdin',
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-write-stream-vs-raw',
    suite: SUITE,
    label: 'files.write(stream) vs raw stdin',
    unit: 'MiB/s',
    values: tput(writeStream),
    baseline: 'raw-stdin',
    higherIsBetter: true,
  });
  r.add({
    key: 'sdk-read-stream-vs-raw',
    suite: SUITE,
    label: 'files.readStream vs raw stdout',
    unit: 'MiB/s',
    values: tput(read),
    baseline: 'raw-stdout',
    higherIsBetter: true,
  });
  for (const [key, what] of [
    ['sdk-write-buffer', 'write (Buffer)'],
    ['sdk-write-stream', 'write (stream)'],
    ['sdk-read-stream', 'readStream'],
  ] as const) {
    const v = r.p50(key);
    r.target(`files ${what} p50 ≥ 100 MiB/s`, v >= 100, `${v.toFixed(0)} MiB/s`);
  }
}
