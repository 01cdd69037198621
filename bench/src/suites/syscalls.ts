/**
 * "What does one system call cost inside a sandbox?" The per-call side of the workload suite:
 * bench/scripts/syscalls.py times getppid, lstat (directories not held), lstat with every
 * directory held open, and open+close over 2,000 small files, on the host (/dev/shm) and in a
 * default sandbox (/work, its overlay), alternating, one run of each per round.
 *
 * It separates the two costs docs/performance.md names: getppid is the systrap round trip
 * alone; lstat minus lstat-pinned is what gVisor's overlay pays to look up directories again
 * because it drops every dentry nobody holds. No targets: it tells where time goes.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Context } from '../context.js';

const execFileP = promisify(execFile);
const SUITE = 'syscalls (host vs sandbox)';
const SCRIPT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../scripts/syscalls.py');
const SANDBOX_SCRIPT = '/work/.bench-syscalls.py';
const SANDBOX_TREE = '/work/sc';
const OPS = ['getppid', 'lstat', 'lstat-pinned', 'open-close'] as const;
type Op = (typeof OPS)[number];

function parse(stdout: string, where: string): Record<Op, number> {
  const line = stdout.trim().split('\n').at(-1) ?? '';
  let out: Record<string, unknown>;
  try {
    out = JSON.parse(line) as Record<string, unknown>;
  } catch {
    throw new Error(`syscalls.py on ${where} printed no result: ${stdout.slice(-500)}`);
  }
  for (const op of OPS) if (typeof out[op] !== 'number') throw new Error(`syscalls.py on ${where}: no ${op} in ${line}`);
  return out as Record<Op, number>;
}

export async function runSyscalls(ctx: Context): Promise<void> {
  const n = ctx.iters.syscalls;
  const hostTree = mkdtempSync('/dev/shm/warren-bench-syscalls-');
  ctx.defer(`remove ${hostTree}`, () => rmSync(hostTree, { recursive: true, force: true }));
  const { sbx, kill } = await ctx.sandbox();
  await sbx.files.write(SANDBOX_SCRIPT, readFileSync(SCRIPT));

  const host = new Map<Op, number[]>(OPS.map((op) => [op, []]));
  const inside = new Map<Op, number[]>(OPS.map((op) => [op, []]));
  for (let round = 0; round < n; round++) {
    // /usr/bin/python3 on the host: the sandbox runs Debian's.
    const h = parse((await execFileP('/usr/bin/python3', [SCRIPT, hostTree])).stdout, 'the host');
    const r = await sbx.exec(['python3', SANDBOX_SCRIPT, SANDBOX_TREE], { check: true, timeoutSeconds: 300 });
    const s = parse(r.stdout, 'the sandbox');
    for (const op of OPS) {
      host.get(op)!.push(h[op]);
      inside.get(op)!.push(s[op]);
    }
  }
  await kill();

  const r = ctx.report;
  for (const op of OPS) {
    const hk = `sc-host-${op}`;
    r.add({ key: hk, suite: SUITE, label: `${op}: host`, unit: 'µs', values: host.get(op)!, isBaseline: true });
    r.add({ key: `sc-sbx-${op}`, suite: SUITE, label: `${op}: sandbox`, unit: 'µs', values: inside.get(op)!, baseline: hk });
  }
  const relookup = r.p50('sc-sbx-lstat') - r.p50('sc-sbx-lstat-pinned');
  r.note(
    `syscalls: the sandbox's lstat costs ${relookup.toFixed(1)} µs more when nothing holds the directories (overlay dentries dropped and looked up again)`,
  );
}
