/**
 * Raw runsc, without warren: a minimal OCI bundle on the base template's rootfs (read-only
 * root, no overlay, --network=none, systrap), with the host's node bind-mounted read-only
 * where the daemon puts it. Containers live under a private --root that is emptied at the end.
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { TEMPLATES } from '@warren/tests/harness';
import type { Context } from './context.js';

export const GUEST_NODE = '/opt/warren/bin/node';
const ROOTFS = path.join(TEMPLATES, 'base/current/rootfs');

export class RawRunsc {
  private readonly root: string;
  private readonly bundles: string;
  private seq = 0;

  constructor(private ctx: Context) {
    const dir = ctx.tmp('raw');
    this.root = path.join(dir, 'runsc');
    this.bundles = path.join(dir, 'bundles');
    mkdirSync(this.root, { recursive: true });
    mkdirSync(this.bundles, { recursive: true });
    // Runs before the temp dir is removed (cleanups are LIFO).
    ctx.defer('delete raw runsc containers', () => this.deleteAll());
  }

  private flags(): string[] {
    return ['--root', this.root, '--platform', 'systrap', '--network', 'none', '--overlay2', 'none'];
  }

  /** Writes a bundle for `args` and returns [container id, bundle dir]. */
  bundle(args: string[]): [string, string] {
    const id = `wbench-${process.pid}-${++this.seq}`;
    const dir = path.join(this.bundles, id);
    mkdirSync(dir);
    const spec = {
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user: { uid: 0, gid: 0 },
        args,
        env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'HOME=/root', 'LANG=C.UTF-8'],
        cwd: '/',
      },
      root: { path: ROOTFS, readonly: true },
      hostname: 'bench',
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc' },
        { destination: GUEST_NODE, type: 'bind', source: process.execPath, options: ['rbind', 'ro'] },
      ],
      linux: {
        namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      },
    };
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify(spec));
    return [id, dir];
  }

  /** `runsc run` in the foreground; resolves with the ms from spawn to exit. */
  async runToExit(args: string[]): Promise<number> {
    const [id, dir] = this.bundle(args);
    let stderr = '';
    const t0 = performance.now();
    const child = spawn('runsc', [...this.flags(), 'run', '--bundle', dir, id], { stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('exit', (c) => resolve(c));
    });
    const elapsed = performance.now() - t0;
    rmSync(dir, { recursive: true, force: true });
    if (code !== 0) throw new Error(`raw runsc run ${args.join(' ')} exited ${code}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`);
    return elapsed;
  }

  /**
   * The transport under warren's files API: `size` bytes into a sandbox's stdin and `size`
   * bytes out of its stdout, with node in the sandbox at each end and the host side spawned by
   * node (its 'pipe' stdio is a socketpair, as for the daemon). Start-up is not timed: the
   * guest says "ready" first. Returns ms for each direction.
   */
  async stdioThroughput(size: number): Promise<{ inMs: number; outMs: number }> {
    const script = `
      const SIZE = ${size};
      let n = 0;
      process.stdout.write('ready\\n');
      process.stdin.on('data', (d) => {
        n += d.length;
        if (n < SIZE) return;
        process.stdin.pause();
        process.stdout.write('got\\n');
        const buf = Buffer.alloc(1 << 20, 120);
        let sent = 0;
        const pump = () => {
          while (sent < SIZE) {
            const part = buf.subarray(0, Math.min(buf.length, SIZE - sent));
            sent += part.length;
            if (!process.stdout.write(part)) return process.stdout.once('drain', pump);
          }
          process.stdout.end(() => process.exit(0));
        };
        pump();
      });`;
    const [id, dir] = this.bundle([GUEST_NODE, '-e', script]);
    const child = spawn('runsc', [...this.flags(), 'run', '--bundle', dir, id], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    let phase: 'ready' | 'got' | 'data' = 'ready';
    let text = '';
    let got = 0;
    let t0 = 0;
    let t1 = 0;
    let t2 = 0;
    const data = Buffer.alloc(1 << 20, 65);
    const done = new Promise<void>((resolve, reject) => {
      child.on('error', reject);
      child.stdout!.on('data', (d: Buffer) => {
        if (phase === 'data') {
          got += d.length;
        } else {
          text += d.toString('latin1');
          if (phase === 'ready' && text.startsWith('ready\n')) {
            text = text.slice(6);
            phase = 'got';
            t0 = performance.now();
            void (async () => {
              for (let sent = 0; sent < size; sent += data.length) {
                if (!child.stdin!.write(data.subarray(0, Math.min(data.length, size - sent)))) await new Promise((r) => child.stdin!.once('drain', r));
              }
            })();
          }
          if (phase === 'got' && text.startsWith('got\n')) {
            t1 = performance.now();
            phase = 'data';
            got = Buffer.byteLength(text.slice(4), 'latin1');
          }
        }
        if (phase === 'data' && got >= size && !t2) {
          t2 = performance.now();
          resolve();
        }
      });
      void exited.then((c) => (t2 ? undefined : reject(new Error(`raw stdio container exited ${c} early: ${stderr.trim().slice(-300)}`))));
    });
    try {
      await done;
    } finally {
      child.stdin!.destroy();
      const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 20_000))]);
      if (code === 'timeout') child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
    return { inMs: t1 - t0, outMs: t2 - t1 };
  }

  /** `runsc run --detach`; the container keeps running until `delete`. */
  async runDetached(args: string[]): Promise<{ id: string; dir: string; remove: () => Promise<void> }> {
    const [id, dir] = this.bundle(args);
    // stdio must not be a pipe: the sandbox inherits it and would hold it open.
    execFileSync('runsc', [...this.flags(), 'run', '--detach', '--bundle', dir, id], { stdio: 'ignore', timeout: 60_000 });
    const remove = this.ctx.defer(`delete raw container ${id}`, () => {
      execFileSync('runsc', [...this.flags(), 'delete', '--force', id], { stdio: 'ignore', timeout: 30_000 });
      rmSync(dir, { recursive: true, force: true });
    });
    return { id, dir, remove };
  }

  private list(): string[] {
    try {
      return execFileSync('runsc', ['--root', this.root, 'list', '--quiet'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    } catch {
      return [];
    }
  }

  private deleteAll(): void {
    for (const id of this.list()) {
      try {
        execFileSync('runsc', [...this.flags(), 'delete', '--force', id], { stdio: 'ignore', timeout: 30_000 });
      } catch {
        // A foreground `runsc run` may be tearing it down at the same moment; checked below.
      }
    }
    const left = this.list();
    if (left.length) console.error(`raw runsc containers left under ${this.root}: ${left.join(' ')}`);
  }
}
