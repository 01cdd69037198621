/**
 * Raw runsc, without warren: a minimal OCI bundle on the base template's rootfs (read-only
 * root, no overlay, --network=none unless a run asks for the host's network, systrap), with
 * the host's node bind-mounted read-only where the daemon puts it. Containers live under a
 * private --root that is emptied at the end.
 */
import { spawn, execFileSync, type ChildProcess, type StdioOptions } from 'node:child_process';
import { lstatSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { TEMPLATES, containerOf } from '@warren/tests/harness';
import type { Context } from './context.js';

export const GUEST_NODE = '/opt/warren/bin/node';
/** --network for a raw run: none (as warren's sandboxes), or the host's stack (hostinet). */
export type RawNetwork = 'none' | 'host';
const ROOTFS = path.join(TEMPLATES, 'base/current/rootfs');

export class RawRunsc {
  private readonly root: string;
  private readonly bundles: string;
  private seq = 0;

  /**
   * `binary`: the runsc to run (the idle suite compares the packaged one with warren's
   * build); `label` keeps two instances' containers and temp dirs apart.
   */
  constructor(
    private ctx: Context,
    private readonly binary = 'runsc',
    private readonly label = 'raw',
  ) {
    const dir = ctx.tmp(label);
    this.root = path.join(dir, 'runsc');
    this.bundles = path.join(dir, 'bundles');
    mkdirSync(this.root, { recursive: true });
    mkdirSync(this.bundles, { recursive: true });
    // Runs before the temp dir is removed (cleanups are LIFO).
    ctx.defer('delete raw runsc containers', () => this.deleteAll());
  }

  private flags(network: RawNetwork = 'none'): string[] {
    return ['--root', this.root, '--platform', 'systrap', '--network', network, '--overlay2', 'none'];
  }

  /** Writes a bundle for `args` and returns [container id, bundle dir]. */
  bundle(args: string[], network: RawNetwork = 'none'): [string, string] {
    const id = `wbench-${process.pid}-${this.label === 'raw' ? '' : `${this.label}-`}${++this.seq}`;
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
        // --network=host shares the host's namespace: the spec must not ask for a new one.
        namespaces: [{ type: 'pid' }, ...(network === 'host' ? [] : [{ type: 'network' }]), { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      },
    };
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify(spec));
    return [id, dir];
  }

  /** `runsc run` in the foreground; resolves with its stdout. Fails on a non-zero exit. */
  async runCapture(args: string[], network: RawNetwork = 'none'): Promise<string> {
    const [id, dir] = this.bundle(args, network);
    const child = spawn(this.binary, [...this.flags(network), 'run', '--bundle', dir, id], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (c) => resolve(c));
    });
    rmSync(dir, { recursive: true, force: true });
    if (code !== 0) throw new Error(`raw runsc run ${args.join(' ')} exited ${code}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`);
    return stdout;
  }

  /** `runsc run` in the foreground; resolves with the ms from spawn to exit. */
  async runToExit(args: string[]): Promise<number> {
    const [id, dir] = this.bundle(args);
    let stderr = '';
    const t0 = performance.now();
    const child = spawn(this.binary, [...this.flags(), 'run', '--bundle', dir, id], { stdio: ['ignore', 'ignore', 'pipe'] });
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
    const child = spawn(this.binary, [...this.flags(), 'run', '--bundle', dir, id], { stdio: ['pipe', 'pipe', 'pipe'] });
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
    execFileSync(this.binary, [...this.flags(), 'run', '--detach', '--bundle', dir, id], { stdio: 'ignore', timeout: 60_000 });
    const remove = this.ctx.defer(`delete raw container ${id}`, () => {
      execFileSync(this.binary, [...this.flags(), 'delete', '--force', id], { stdio: 'ignore', timeout: 30_000 });
      rmSync(dir, { recursive: true, force: true });
    });
    return { id, dir, remove };
  }

  private list(): string[] {
    try {
      return execFileSync(this.binary, ['--root', this.root, 'list', '--quiet'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    } catch {
      return [];
    }
  }

  private deleteAll(): void {
    for (const id of this.list()) {
      try {
        execFileSync(this.binary, [...this.flags(), 'delete', '--force', id], { stdio: 'ignore', timeout: 30_000 });
      } catch {
        // A foreground `runsc run` may be tearing it down at the same moment; checked below.
      }
    }
    const left = this.list();
    if (left.length) console.error(`raw runsc containers left under ${this.root}: ${left.join(' ')}`);
  }
}

/** Allocated bytes of everything under dir (blocks, as `du` counts them). */
function allocatedBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    total += e.isDirectory() ? allocatedBytes(p) : lstatSync(p).blocks * 512;
  }
  return total;
}

/**
 * Raw `runsc checkpoint` and `runsc restore` of a warren sandbox, without the daemon: the
 * baseline of fork and hibernate. The checkpoint runs against the daemon's own container
 * (`--root <home>/runsc`) with `--leave-running`, so the sandbox carries on untouched; the
 * image goes under /var/lib/warren-bench, on the same disk as the daemon's images. The
 * restore runs under a private --root in /tmp, from a copy of the sandbox's bundle with its
 * own cgroup and a fresh overlay filestore dir, with the daemon's flags; it is deleted at once.
 */
export class RawCheckpoint {
  private readonly root: string;
  private readonly bundles: string;
  private readonly images: string;
  private seq = 0;

  constructor(ctx: Context) {
    const dir = ctx.tmp('raw-restore');
    this.root = path.join(dir, 'runsc');
    this.bundles = path.join(dir, 'bundles');
    mkdirSync(this.root, { recursive: true });
    mkdirSync(this.bundles, { recursive: true });
    this.images = ctx.benchDir('raw-images-');
    // Runs before the image and temp dirs are removed (cleanups are LIFO).
    ctx.defer('delete raw restored containers', () => this.deleteAll());
  }

  /**
   * `runsc checkpoint --leave-running --compression=none` (the daemon's flags) of sandbox
   * `id` of the daemon whose home is `home`. Returns the ms until runsc exits, the image dir
   * (remove it with `removeImage`) and its allocated size.
   */
  async checkpoint(home: string, id: string): Promise<{ ms: number; image: string; bytes: number }> {
    const image = path.join(this.images, `cp-${++this.seq}`);
    mkdirSync(image, { mode: 0o700 });
    const args = [
      '--root',
      path.join(home, 'runsc'),
      '--platform',
      'systrap',
      'checkpoint',
      '--leave-running',
      '--compression=none',
      '--image-path',
      image,
      containerOf(home, id).id,
    ];
    const t0 = performance.now();
    const { code, stderr } = await runToExit('runsc', args, ['ignore', 'ignore', 'pipe']);
    const ms = performance.now() - t0;
    if (code !== 0) {
      this.removeImage(image);
      throw new Error(`raw runsc checkpoint of ${id} exited ${code}: ${lastLine(stderr)}`);
    }
    return { ms, image, bytes: allocatedBytes(image) };
  }

  removeImage(image: string): void {
    rmSync(image, { recursive: true, force: true });
  }

  /**
   * `runsc restore --detach` of `image` as a new container, with the bundle of sandbox `id`
   * of the daemon at `home`: `ms` until runsc exits (the restored sandbox is running). With
   * `hibernate`, the restored copy is then put down as the daemon hibernates a sandbox: a
   * `runsc checkpoint` without --leave-running (`stopMs`, until runsc exits; the sandbox
   * stops) and a `runsc delete` (`deleteMs`). The container is deleted before this returns.
   * The restored agent's stdio are sockets, as for the daemon (node's 'pipe' stdio is a
   * socketpair): a restore fails on anything else.
   */
  async restore(home: string, id: string, image: string, opts: { hibernate?: boolean } = {}): Promise<{ ms: number; stopMs?: number; deleteMs?: number }> {
    const rid = `wbench-restore-${process.pid}-${++this.seq}`;
    const bundle = path.join(this.bundles, rid);
    const filestore = path.join(bundle, 'fs');
    mkdirSync(filestore, { recursive: true });
    const spec = JSON.parse(readFileSync(path.join(containerOf(home, id).dir, 'config.json'), 'utf8')) as { linux: { cgroupsPath?: string } };
    spec.linux.cgroupsPath = `/${RAW_CGROUP_PARENT}/${rid}`;
    writeFileSync(path.join(bundle, 'config.json'), JSON.stringify(spec));
    const args = [
      '--root',
      this.root,
      '--platform',
      'systrap',
      '--network',
      'none',
      '--overlay2',
      `root:dir=${filestore}`,
      'restore',
      '--detach',
      '--image-path',
      image,
      '--bundle',
      bundle,
      rid,
    ];
    const t0 = performance.now();
    const { code, stderr, child } = await runToExit('runsc', args, ['pipe', 'pipe', 'pipe']);
    const out: { ms: number; stopMs?: number; deleteMs?: number } = { ms: performance.now() - t0 };
    let deleted = false;
    try {
      if (code !== 0) throw new Error(`raw runsc restore of ${id}'s image exited ${code}: ${lastLine(stderr)}`);
      if (opts.hibernate) {
        const again = path.join(bundle, 'image');
        mkdirSync(again, { mode: 0o700 });
        const t1 = performance.now();
        const cp = await runToExit(
          'runsc',
          ['--root', this.root, '--platform', 'systrap', 'checkpoint', '--compression=none', '--image-path', again, rid],
          ['ignore', 'ignore', 'pipe'],
        );
        out.stopMs = performance.now() - t1;
        if (cp.code !== 0) throw new Error(`raw runsc checkpoint of restored ${rid} exited ${cp.code}: ${lastLine(cp.stderr)}`);
        const t2 = performance.now();
        this.delete(rid);
        out.deleteMs = performance.now() - t2;
        deleted = true;
      }
    } finally {
      if (!deleted) this.delete(rid);
      child.stdin?.destroy();
      child.stdout?.destroy();
      child.stderr?.destroy();
      rmSync(bundle, { recursive: true, force: true });
    }
    return out;
  }

  private delete(rid: string): void {
    try {
      execFileSync('runsc', ['--root', this.root, 'delete', '--force', rid], { stdio: 'ignore', timeout: 30_000 });
    } catch {
      // not created, or already gone; deleteAll reports what is left
    }
    removeRawCgroup(rid);
  }

  private list(): string[] {
    try {
      return execFileSync('runsc', ['--root', this.root, 'list', '--quiet'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    } catch {
      return [];
    }
  }

  private deleteAll(): void {
    for (const id of this.list()) this.delete(id);
    const left = this.list();
    if (left.length) console.error(`raw restored containers left under ${this.root}: ${left.join(' ')}`);
    removeRawCgroup();
  }
}

const RAW_CGROUP_PARENT = 'warren-bench';

/** Removes the cgroup dirs of raw container `rid` (or, without it, the empty parents) in every hierarchy. */
function removeRawCgroup(rid?: string): void {
  let hierarchies: string[] = [];
  try {
    hierarchies = readdirSync('/sys/fs/cgroup');
  } catch {
    return;
  }
  for (const h of hierarchies) {
    const parent = path.join('/sys/fs/cgroup', h, RAW_CGROUP_PARENT);
    for (const dir of rid ? [path.join(parent, rid), parent] : [parent]) {
      try {
        rmdirSync(dir);
      } catch {
        // absent, already removed by runsc, or (the parent) still in use
      }
    }
  }
}

function lastLine(text: string): string {
  return text.trim().split('\n').slice(-3).join(' | ') || 'no output';
}

/** Spawns and waits for exit; keeps the child (and its stdio) for the caller. */
async function runToExit(cmd: string, args: string[], stdio: StdioOptions): Promise<{ code: number | null; stderr: string; child: ChildProcess }> {
  const child = spawn(cmd, args, { stdio });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  // Restored agents write to their stdout once up; keep it drained until we destroy it.
  child.stdout?.on('data', () => undefined);
  const code = await new Promise<number | null>((resolve) => {
    child.on('error', (err) => {
      stderr += err.message;
      resolve(-1);
    });
    child.on('exit', (c) => resolve(c));
  });
  return { code, stderr, child };
}
