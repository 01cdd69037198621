/**
 * The first layer of a template `from: debian:bookworm`: debootstrap (minbase) on the host,
 * the way scripts/setup.sh always built base. It needs root and the Debian mirror, which is
 * read from this machine's apt configuration (or $WARREN_DEBIAN_MIRROR) so that no archive
 * host is written into warren.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import { LineSplitter } from './lines.js';

const DEBIAN_SUITE = 'bookworm';

/** Same rules as debian_mirror in scripts/lib.sh. */
function debianMirror(): string {
  if (process.env.WARREN_DEBIAN_MIRROR) return process.env.WARREN_DEBIAN_MIRROR;
  const dir = '/etc/apt/sources.list.d';
  const files = existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => f.endsWith('.sources'))
        .sort()
    : [];
  for (const f of files) {
    const text = readFileSync(path.join(dir, f), 'utf8');
    // deb822 stanzas are separated by blank lines.
    for (const stanza of text.split(/\n\s*\n/)) {
      if (!new RegExp(`^Suites:.*\\b${DEBIAN_SUITE}\\b`, 'm').test(stanza)) continue;
      const uri = /^URIs:\s*(\S+)/m.exec(stanza)?.[1];
      if (uri) return uri;
    }
  }
  if (existsSync('/etc/apt/sources.list')) {
    for (const line of readFileSync('/etc/apt/sources.list', 'utf8').split('\n')) {
      const [type, uri, suite] = line.trim().split(/\s+/);
      if (type === 'deb' && suite === DEBIAN_SUITE && uri) return uri;
    }
  }
  throw new WarrenError('failed_precondition', `cannot find the Debian mirror for ${DEBIAN_SUITE} in apt's sources; set WARREN_DEBIAN_MIRROR`);
}

export interface DebootstrapRun {
  target: string;
  include: string[];
  onLine: (stream: 'stdout' | 'stderr', line: string) => void;
  /** Told the child's pid once it runs, so a crash clean-up can kill it. */
  onSpawn: (pid: number) => Promise<void>;
  signal: AbortSignal;
}

export async function debootstrap(run: DebootstrapRun): Promise<{ exitCode: number | null; tail: string[]; aborted: boolean }> {
  const args = ['--variant=minbase'];
  if (run.include.length) args.push(`--include=${run.include.join(',')}`);
  args.push(DEBIAN_SUITE, run.target, debianMirror());
  // Its own process group, so it and its dpkg children can be killed together.
  const child = spawn('debootstrap', args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const tail: string[] = [];
  const out = new LineSplitter((l) => run.onLine('stdout', l), tail);
  const err = new LineSplitter((l) => run.onLine('stderr', l), tail);
  child.stdout.on('data', (d: Buffer) => out.push(d));
  child.stderr.on('data', (d: Buffer) => err.push(d));
  let aborted = false;
  const onAbort = () => {
    aborted = true;
    if (child.pid) process.kill(-child.pid, 'SIGKILL');
  };
  run.signal.addEventListener('abort', onAbort, { once: true });
  if (child.pid) await run.onSpawn(child.pid);
  const exitCode = await new Promise<number | null>((resolve) => {
    child.on('error', (e) => {
      tail.push(`cannot run debootstrap: ${e.message} (install it: apt-get install debootstrap)`);
      resolve(null);
    });
    child.on('close', (code) => resolve(code));
  });
  run.signal.removeEventListener('abort', onAbort);
  out.end();
  err.end();
  return { exitCode, tail, aborted };
}
