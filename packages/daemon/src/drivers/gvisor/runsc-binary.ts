/**
 * Picks the runsc binary every sandbox runs with, once at daemon start (docs/runsc.md):
 * WARREN_RUNSC when set; else warren's own build (scripts/build-runsc.sh, with the patch that
 * parks the idle fast-path monitor) when it passes a self-check; else the packaged runsc in
 * PATH. The choice and its reason are logged and reported by GET /v1/health (`warren doctor`).
 */
import { execFile } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { WarrenError, type RunscInfo } from '@warren/protocol';

const execFileP = promisify(execFile);

/** Where scripts/build-runsc.sh installs its builds; `current` links the newest. */
export const DEFAULT_RUNSC_CACHE = '/usr/local/lib/warren/runsc';
/** The build script's log, named when the patched build is missing. */
const BUILD_LOG = '/var/cache/warren/runsc-build/build.log';
const SELF_CHECK_TIMEOUT_MS = 10_000;

export interface RunscChoiceOptions {
  /** WARREN_RUNSC (or the daemon's runscBinary override): used as given, no fallback. */
  override?: string;
  /** Directory of patched builds (WARREN_RUNSC_CACHE). */
  cacheDir: string;
}

/** The file a command name runs, found in PATH like a shell would. */
function findExecutable(name: string): string {
  if (name.includes('/')) return path.resolve(name);
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const candidate = path.join(dir || '.', name);
    if (existsSync(candidate)) return candidate;
  }
  throw new WarrenError('failed_precondition', `${name} not found in PATH; install runsc (scripts/setup.sh) or set WARREN_RUNSC`);
}

type SelfCheck = { ok: true; version: string } | { ok: false; detail: string };

/**
 * `runsc --version` must run and name itself: catches a truncated or foreign binary, a
 * missing loader or a wrong architecture before the first sandbox would.
 */
async function selfCheck(binary: string): Promise<SelfCheck> {
  try {
    const { stdout } = await execFileP(binary, ['--version'], { timeout: SELF_CHECK_TIMEOUT_MS, killSignal: 'SIGKILL' });
    const first = stdout.split('\n')[0] ?? '';
    if (!first.startsWith('runsc version')) return { ok: false, detail: `unexpected --version output '${first.slice(0, 80)}'` };
    return { ok: true, version: first };
  } catch (err) {
    const e = err as { code?: string; killed?: boolean; message: string };
    return { ok: false, detail: e.killed ? '--version timed out' : (e.code ?? e.message.split('\n')[0] ?? 'failed') };
  }
}

export async function chooseRunsc(opts: RunscChoiceOptions): Promise<RunscInfo> {
  if (opts.override) {
    const binary = findExecutable(opts.override);
    const check = await selfCheck(binary);
    // No silent fallback: whoever set WARREN_RUNSC wants that binary or nothing.
    if (!check.ok) throw new WarrenError('failed_precondition', `WARREN_RUNSC=${opts.override} (${binary}) fails its self-check: ${check.detail}`);
    return { kind: 'override', binary, version: check.version, reason: 'WARREN_RUNSC names it' };
  }
  const current = path.join(opts.cacheDir, 'current', 'runsc');
  let why: string;
  if (existsSync(current)) {
    // The resolved path, so that the bake key (path, size, mtime) changes with the build.
    const binary = realpathSync(current);
    const check = await selfCheck(binary);
    if (check.ok) return { kind: 'patched', binary, version: check.version, reason: 'warren build with the idle fast-path fix (scripts/build-runsc.sh)' };
    why = `the patched build ${binary} fails its self-check (${check.detail}); rebuild with bash scripts/build-runsc.sh`;
  } else {
    why = `no patched build at ${current} (bash scripts/build-runsc.sh makes one; a failed build logs to ${BUILD_LOG})`;
  }
  const binary = findExecutable('runsc');
  const check = await selfCheck(binary);
  if (!check.ok) throw new WarrenError('failed_precondition', `${binary} fails its self-check: ${check.detail}; ${why}`);
  return { kind: 'packaged', binary, version: check.version, reason: why };
}
