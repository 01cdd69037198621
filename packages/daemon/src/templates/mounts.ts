/**
 * Host overlayfs mounts for build steps. Every mount lives under a build's staging
 * directory, so crash clean-up can find them by path (mountsUnder) and nothing else.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { WarrenError } from '@warren/protocol';

const execFileP = promisify(execFile);

// mount(2) takes its options in one page; lowerdir paths are given relative to cwdDir
// (the kernel resolves them against the caller's cwd) to fit more layers.
const MAX_OPTIONS = 4000;

export interface OverlayMount {
  /** Lower layers, topmost first. */
  lower: string[];
  /** Absent for a read-only merge of the lowers. */
  upper?: string;
  work?: string;
  target: string;
  /** Directory the lower paths are made relative to. */
  cwdDir: string;
}

export async function mountOverlay(m: OverlayMount): Promise<void> {
  const rel = (p: string) => {
    const r = path.relative(m.cwdDir, p) || '.';
    if (/[:,\\]/.test(r)) throw new WarrenError('internal', `layer path ${p} contains ':', ',' or '\\', which overlayfs options cannot carry`);
    return r;
  };
  const opts = [`lowerdir=${m.lower.map(rel).join(':')}`];
  if (m.upper) opts.push(`upperdir=${rel(m.upper)}`, `workdir=${rel(m.work!)}`);
  // Flattening reads the upper dirs as plain trees: every copied-up file must hold its data
  // (no metacopy) and renamed directories must not be redirects (no redirect_dir).
  opts.push('redirect_dir=off', 'metacopy=off', 'index=off');
  if (!m.upper) opts.push('ro');
  const options = opts.join(',');
  if (options.length > MAX_OPTIONS) throw new WarrenError('invalid_argument', `too many layers for one overlay mount (${m.lower.length}); use fewer steps`);
  try {
    await execFileP('mount', ['-t', 'overlay', 'overlay', '-o', options, m.target], { cwd: m.cwdDir });
  } catch (err) {
    throw new WarrenError('internal', 'cannot mount the overlay of a build step', {
      cause: `${m.target}: ${((err as { stderr?: string }).stderr || (err as Error).message).trim()}`,
    });
  }
}

/** Unmounts, retrying while the mount is busy (a gofer that is still exiting). */
export async function unmount(target: string): Promise<void> {
  let last = '';
  for (let i = 0; i < 50; i++) {
    try {
      await execFileP('umount', [target]);
      return;
    } catch (err) {
      last = ((err as { stderr?: string }).stderr || (err as Error).message).trim();
      if (!/busy/i.test(last)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  if (!(await mountsUnder(target)).includes(target)) return;
  throw new WarrenError('internal', 'cannot unmount the overlay of a build step', { cause: `${target}: ${last}` });
}

/** Mount points at or below dir, deepest first (the order to unmount them in). */
export async function mountsUnder(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const points = text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const point = line.split(' ')[4]; // the fifth field (proc(5))
      if (point === undefined) throw new WarrenError('internal', 'cannot read the mount table', { cause: `unexpected line in /proc/self/mountinfo: ${line}` });
      return unescapeMountPath(point);
    })
    .filter((p) => p === dir || p.startsWith(prefix));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}
