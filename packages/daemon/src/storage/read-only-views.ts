/**
 * Read-only views: host directories re-mounted read-only on the host itself, so that every
 * host path a sandbox sees is read-only at the host kernel, not only in the Sentry's view.
 *
 * Why: runsc's `ro` bind-mount option lives in the Sentry's mount table. Root inside a
 * sandbox can make a user namespace, remount the mount read-write there, and the Sentry
 * then writes through to the host file (it opened the host directory itself; measured with
 * runsc 20240729: `unshare -Urm sh -c 'mount -o remount,rw /opt/warren/lib && ...'` created
 * files in the host's guest directory, and a plain `: > FILE` truncated a host file before
 * answering EROFS). A bind mount that is read-only on the host refuses every such write with
 * EROFS whatever the Sentry thinks (docs/security.md).
 *
 * A view is a bind mount of `source` at `target`, read-only and private (nothing mounted
 * later under source propagates into it). Views outlive the daemon on purpose: sandboxes
 * keep running across daemon restarts, and a restart finds its views in place.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';

export interface MountEntry {
  target: string;
  options: string[];
}

/** Octal escapes in /proc/self/mountinfo paths (space, tab, newline, backslash). */
function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** The mount table of this process's mount namespace, in mount order. */
export function readMountTable(text = readFileSync('/proc/self/mountinfo', 'utf8')): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    // id parent major:minor root mount-point mount-options [optional fields] - type source super-options
    const fields = line.split(' ');
    const target = fields[4];
    const options = fields[5];
    if (target === undefined || options === undefined) continue;
    out.push({ target: unescapeMountPath(target), options: options.split(',') });
  }
  return out;
}

/** The mount that is topmost at exactly this path, if one is. */
function topMountAt(target: string, table: MountEntry[]): MountEntry | undefined {
  let top: MountEntry | undefined;
  for (const m of table) if (m.target === target) top = m;
  return top;
}

export interface ViewStatus {
  target: string;
  source: string;
  ok: boolean;
  detail: string;
}

/** Whether target is a read-only bind mount of source (same directory inode, `ro` on the host). */
export function inspectView(source: string, target: string, table: MountEntry[] = readMountTable()): ViewStatus {
  const top = topMountAt(target, table);
  if (!top) return { source, target, ok: false, detail: 'not mounted' };
  let same = false;
  try {
    const a = statSync(source);
    const b = statSync(target);
    same = a.dev === b.dev && a.ino === b.ino;
  } catch (err) {
    return { source, target, ok: false, detail: `cannot stat: ${(err as Error).message}` };
  }
  if (!same) return { source, target, ok: false, detail: `mounted, but not a bind mount of ${source}` };
  if (!top.options.includes('ro')) return { source, target, ok: false, detail: 'mounted read-write' };
  return { source, target, ok: true, detail: 'read-only bind mount' };
}

function mountCommand(args: string[]): void {
  try {
    execFileSync('mount', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new WarrenError(
      'failed_precondition',
      `cannot make the read-only view ${args.at(-1) ?? ''} (mount ${args.join(' ')}): ${stderr || (err as Error).message}; the daemon must run as root`,
    );
  }
}

/**
 * Makes target a read-only, private bind mount of source, unless it already is one.
 * Idempotent; a stale view (another source, or read-write) is replaced.
 */
export function ensureReadOnlyView(source: string, target: string): void {
  // A file is bind-mounted onto a file, a directory onto a directory.
  if (statSync(source).isDirectory()) mkdirSync(target, { recursive: true, mode: 0o700 });
  else if (!existsSync(target)) {
    mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
    writeFileSync(target, '', { mode: 0o600 });
  }
  let status = inspectView(source, target);
  if (status.ok) return;
  while (status.detail.startsWith('mounted, but not')) {
    execFileSync('umount', ['-l', target]);
    status = inspectView(source, target);
  }
  if (status.detail === 'not mounted') mountCommand(['--bind', source, target]);
  mountCommand(['--make-private', target]);
  // A bind mount takes its flags from the first mount call only: read-only needs a remount.
  mountCommand(['-o', 'remount,bind,ro', target]);
  const after = inspectView(source, target);
  if (!after.ok) throw new WarrenError('failed_precondition', `the view ${target} of ${source} is not read-only after mounting it: ${after.detail}`);
}

/** Removes a view (tests and tools that remove a whole home). Lazy: sandboxes may still hold it. */
export function removeView(target: string): void {
  while (topMountAt(target, readMountTable())) execFileSync('umount', ['-l', target]);
}
