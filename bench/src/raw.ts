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

  private deleteAll(): void {
    let ids: string[] = [];
    try {
      ids = execFileSync('runsc', ['--root', this.root, 'list', '--quiet'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    } catch {
      return;
    }
    for (const id of ids) {
      try {
        execFileSync('runsc', [...this.flags(), 'delete', '--force', id], { stdio: 'ignore', timeout: 30_000 });
      } catch (err) {
        console.error(`could not delete raw container ${id}: ${(err as Error).message}`);
      }
    }
  }
}
