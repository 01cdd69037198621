/**
 * Directory transfer: a generated source tree of 5,000 files (about 80 MB, 100 directories)
 * uploaded with files.uploadDir and downloaded with files.downloadDir, against a local
 * `tar -c | tar -x` of the same tree on the host in the same run (issue 14's target: upload
 * at most 2x the local tar).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Context } from '../context.js';

const SUITE = 'dirs';
const FILES = 5000;
const DIRS = 100;

/** Deterministic sizes from 1 to 31 KiB (about 16 KiB on average: 80 MB in all), random bytes. */
function generateTree(root: string): number {
  let bytes = 0;
  let seed = 12345;
  const next = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed;
  };
  const block = Buffer.alloc(32 * 1024);
  for (let i = 0; i < block.length; i++) block[i] = next() & 0xff;
  for (let i = 0; i < FILES; i++) {
    const dir = path.join(root, `pkg${i % DIRS}`, `mod${i % 7}`);
    mkdirSync(dir, { recursive: true });
    const size = 1024 + (next() % (30 * 1024));
    const start = next() % (block.length - size);
    writeFileSync(path.join(dir, `file${i}.ts`), block.subarray(start, start + size));
    bytes += size;
  }
  return bytes;
}

export async function runDirs(ctx: Context): Promise<void> {
  const reps = ctx.iters.dirs;
  const work = ctx.tmp('dirs');
  const tree = path.join(work, 'tree');
  const bytes = generateTree(tree);
  const { sbx, kill } = await ctx.sandbox({ resources: { diskMB: 2048 } });
  const local: number[] = [];
  const up: number[] = [];
  const down: number[] = [];
  try {
    for (let i = 0; i < reps; i++) {
      // Interleaved, so that load from other work on the machine hits all three alike.
      const dst = path.join(work, 'local-copy');
      mkdirSync(dst);
      let t0 = performance.now();
      execFileSync('bash', ['-c', `tar -C "$1" -cf - . | tar -C "$2" -xf -`, 'tar', tree, dst]);
      local.push(performance.now() - t0);
      rmSync(dst, { recursive: true, force: true });

      t0 = performance.now();
      const r = await sbx.files.uploadDir(tree, '/home/user/bench-tree', { exists: 'replace' });
      up.push(performance.now() - t0);
      if (r.files !== FILES) throw new Error(`uploadDir stored ${r.files} files`);

      const back = path.join(work, 'back');
      t0 = performance.now();
      await sbx.files.downloadDir('/home/user/bench-tree', back);
      down.push(performance.now() - t0);
      rmSync(back, { recursive: true, force: true });
      process.stdout.write('.');
    }
    process.stdout.write('\n');
  } finally {
    await kill();
    rmSync(work, { recursive: true, force: true });
  }
  const mb = (bytes / 1e6).toFixed(0);
  const r = ctx.report;
  r.add({ key: 'local-tar', suite: SUITE, label: `host: tar -c | tar -x, ${FILES} files, ${mb} MB`, unit: 'ms', values: local, isBaseline: true });
  r.add({
    key: 'upload-dir',
    suite: SUITE,
    label: `files.uploadDir, ${FILES} files, ${mb} MB`,
    unit: 'ms',
    values: up,
    baseline: 'local-tar',
    note: 'target: at most 2x the local tar',
  });
  r.add({ key: 'download-dir', suite: SUITE, label: `files.downloadDir, ${FILES} files, ${mb} MB`, unit: 'ms', values: down, baseline: 'local-tar' });
  const upload = r.p50('upload-dir');
  const tar = r.p50('local-tar');
  r.target(
    'dirs: uploadDir p50 ≤ 2x local tar -c | tar -x',
    upload <= 2 * tar,
    `${upload.toFixed(0)} ms vs ${tar.toFixed(0)} ms (${(upload / tar).toFixed(2)}x)`,
  );
}
