/** `warren doctor`: checks what warren needs on this host and says how to fix what is missing. */
import { execFileSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, statSync, statfsSync } from 'node:fs';
import path from 'node:path';
import { HttpClient, resolveApiKey } from '@warren/sdk';
import { inspectHostViews, layout, resolveConfig } from '@warren/daemon';
import type { HealthInfo, RunscInfo } from '@warren/sdk';
import { safe } from './output.js';

interface Check {
  name: string;
  ok: boolean;
  /** Works, but worse than it could: printed as `warn` with its fix; the exit status stays 0. */
  warn?: boolean;
  detail: string;
  fix?: string;
}

const MIN_RUNSC_DATE = 20240729;

/** The packaged runsc (or WARREN_RUNSC): what the daemon falls back to, so it must be recent. */
function runscCheck(): Check {
  try {
    const out = execFileSync(process.env.WARREN_RUNSC || 'runsc', ['--version'], { encoding: 'utf8' });
    const date = Number(/(\d{8})/.exec(out)?.[1] ?? 0);
    const ok = date >= MIN_RUNSC_DATE;
    return {
      name: 'runsc',
      ok,
      detail: out.split('\n')[0] ?? '',
      fix: ok ? undefined : 'install runsc from bookworm-backports: bash scripts/setup.sh (or apt-get install -t bookworm-backports runsc)',
    };
  } catch {
    return { name: 'runsc', ok: false, detail: 'not found', fix: 'run bash scripts/setup.sh (installs runsc from bookworm-backports)' };
  }
}

/**
 * Which runsc the running daemon chose and why (GET /v1/health). The packaged one is a
 * warning, not a failure (setup must pass without the build): sandboxes work, but each idle
 * one costs 3-4% of a core.
 */
function runscInUseCheck(runsc: RunscInfo): Check {
  const warn = runsc.kind === 'packaged';
  return {
    name: 'runsc in use',
    ok: true,
    warn,
    detail: `${runsc.kind} ${runsc.binary} (${runsc.version}): ${runsc.reason}`,
    fix: !warn
      ? undefined
      : 'bash scripts/build-runsc.sh, then restart the daemon (idle sandboxes cost 3-4% of a core each with the packaged runsc; docs/runsc.md)',
  };
}

/**
 * zstd packs hibernated images (core/image-pages.ts). Without it hibernation still works, its
 * images stay ~4x larger, and images packed before cannot be resumed until it is back.
 */
function zstdCheck(): Check {
  try {
    const out = execFileSync('zstd', ['--version'], { encoding: 'utf8' });
    return { name: 'zstd', ok: true, detail: out.trim() };
  } catch {
    return {
      name: 'zstd',
      ok: true,
      warn: true,
      detail: 'not found: hibernated images are kept unpacked (~4x the disk), and packed ones cannot resume',
      fix: 'apt-get install zstd (or bash scripts/setup.sh)',
    };
  }
}

function kernelChecks(): Check[] {
  const checks: Check[] = [];
  const memCg = existsSync('/sys/fs/cgroup/memory/memory.limit_in_bytes') || existsSync('/sys/fs/cgroup/memory.max');
  checks.push({
    name: 'cgroup memory controller',
    ok: memCg,
    detail: memCg ? 'present' : 'missing',
    fix: memCg ? undefined : 'boot with the memory cgroup controller enabled',
  });
  const pidsCg = existsSync('/sys/fs/cgroup/pids') || existsSync('/sys/fs/cgroup/cgroup.controllers');
  checks.push({
    name: 'cgroup pids controller',
    ok: pidsCg,
    detail: pidsCg ? 'present' : 'missing',
    fix: pidsCg ? undefined : 'enable the pids cgroup controller',
  });
  const seccomp = readFileSync('/proc/self/status', 'utf8').includes('Seccomp:');
  checks.push({
    name: 'seccomp (for the systrap platform)',
    ok: seccomp,
    detail: seccomp ? 'supported' : 'missing',
    fix: seccomp ? undefined : 'use a kernel with CONFIG_SECCOMP',
  });
  const root = process.getuid?.() === 0;
  checks.push({
    name: 'running as root',
    ok: root,
    detail: root ? 'yes' : 'no',
    fix: root ? undefined : 'run the daemon as root (runsc needs it for cgroups and namespaces)',
  });
  return checks;
}

function storageChecks(home: string): Check[] {
  const checks: Check[] = [];
  try {
    accessSync(home, constants.W_OK);
    const fs = statfsSync(home);
    const freeGiB = (fs.bavail * fs.bsize) / 1024 ** 3;
    checks.push({
      name: `storage ${home}`,
      ok: freeGiB >= 5,
      detail: `${freeGiB.toFixed(1)} GiB free`,
      fix: freeGiB >= 5 ? undefined : 'free disk space or point WARREN_HOME elsewhere',
    });
  } catch {
    checks.push({
      name: `storage ${home}`,
      ok: false,
      detail: 'missing or not writable',
      fix: 'run bash scripts/setup.sh, or start the daemon once to create it',
    });
    return checks;
  }
  const base = path.join(home, 'templates/base/current/rootfs/bin/bash');
  checks.push({
    name: 'template base',
    ok: existsSync(base),
    detail: existsSync(base) ? 'built' : 'not built',
    fix: existsSync(base) ? undefined : `WARREN_HOME=${home} ./bin/warren template build --local templates/base/recipe.json (or bash scripts/setup.sh)`,
  });
  return checks;
}

/**
 * Every host path handed to a sandbox must be read-only on the host itself, not only inside
 * the sandbox (docs/security.md): the daemon mounts read-only views and mounts only those.
 */
function readOnlyViewChecks(home: string): Check[] {
  const paths = layout(home);
  const { templatesDir } = resolveConfig({ home });
  return inspectHostViews({ guestDir: paths.guest, viewsDir: paths.views, templatesDir, nodeBinary: process.execPath }).map((v) => ({
    name: `read-only view ${v.target}`,
    ok: v.ok,
    detail: v.ok ? `${v.detail} of ${v.source}` : `${v.detail} (source ${v.source})`,
    fix: v.ok ? undefined : 'start the daemon as root (it mounts the views), or restart it: sandboxes must not get host paths they could write',
  }));
}

function keyCheck(home: string): Check {
  const file = path.join(home, 'admin.key');
  if (process.env.WARREN_API_KEY) return { name: 'API key', ok: true, detail: 'from WARREN_API_KEY' };
  if (!existsSync(file))
    return { name: 'API key', ok: false, detail: `${file} missing`, fix: 'start the daemon once (it creates the admin key), or set WARREN_API_KEY' };
  const mode = statSync(file).mode & 0o777;
  const ok = mode === 0o600;
  return { name: 'API key', ok, detail: `${file} mode ${mode.toString(8)}`, fix: ok ? undefined : `chmod 600 ${file}` };
}

async function daemonChecks(): Promise<Check[]> {
  const http = new HttpClient();
  try {
    const h = await http.json<HealthInfo>('GET', '/v1/health');
    const daemon = { name: 'daemon', ok: true, detail: `${http.url} version ${h.version}, ${h.sandboxes} live sandboxes` };
    // An older daemon does not report its runsc.
    return h.runsc ? [daemon, runscInUseCheck(h.runsc)] : [daemon];
  } catch (err) {
    const hasKey = resolveApiKey() !== undefined;
    return [
      {
        name: 'daemon',
        ok: false,
        detail: (err as Error).message,
        fix: hasKey ? 'start it: ./bin/warren daemon' : 'set WARREN_API_KEY or run as root so the key file is readable',
      },
    ];
  }
}

export async function doctor(): Promise<boolean> {
  const home = process.env.WARREN_HOME ?? '/var/lib/warren';
  const checks = [runscCheck(), zstdCheck(), ...kernelChecks(), ...storageChecks(home), ...readOnlyViewChecks(home), keyCheck(home), ...(await daemonChecks())];
  for (const c of checks) {
    process.stdout.write(`${c.ok ? (c.warn ? 'warn' : 'ok  ') : 'FAIL'}  ${safe(c.name)}: ${safe(c.detail)}\n`);
    if ((!c.ok || c.warn) && c.fix) process.stdout.write(`      fix: ${safe(c.fix)}\n`);
  }
  return checks.every((c) => c.ok);
}
