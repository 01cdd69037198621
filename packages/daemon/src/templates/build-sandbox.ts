/**
 * Runs one build step's command in a gVisor sandbox: `runsc run` (not detached) under the
 * daemon's runsc root, rootfs = the step's overlayfs mount (--overlay2=none, so writes go
 * straight to the step's new upper layer), host networking so apt can fetch packages.
 * An operator's build steps are trusted input, like a Dockerfile; a key's run steps get no
 * network (plan.ts, TenantBuild); sandboxes themselves never get a network device
 * (docs/templates.md). No cgroup: build steps are not metered.
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Runsc } from '../drivers/gvisor/runsc.js';
import { GUEST_LIB_DIR, GUEST_NODE_PATH, SANDBOX_CAPABILITIES } from '../drivers/gvisor/bundle.js';
import { LineSplitter } from './lines.js';
import type { TemplateUser } from './passwd.js';
import { BUILD_CA_FILE, type SandboxHostFiles } from '../storage/sandbox-host-files.js';

export interface BuildCommand {
  containerId: string;
  bundleDir: string;
  /** The merged overlay mount. */
  rootfs: string;
  script: string;
  user: TemplateUser;
  cwd: string;
  env: Record<string, string>;
  /** host: the host's network namespace (apt, an admin's run steps); none: loopback only. */
  network: 'host' | 'none';
  /** Mounted read-only: the node binary, resolv.conf and the host's CA bundle, from the read-only guest view. */
  hostFiles: Pick<SandboxHostFiles, 'node' | 'resolvConf' | 'buildTrust'>;
  onLine: (stream: 'stdout' | 'stderr', line: string) => void;
  signal: AbortSignal;
}

export interface BuildCommandResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The last lines of output (stdout and stderr interleaved as they came). */
  tail: string[];
  aborted: boolean;
}

export function buildRunsc(binary: string, root: string): Runsc {
  return new Runsc({ binary, root, platform: 'systrap' });
}

export async function runBuildCommand(runsc: Runsc, cmd: BuildCommand): Promise<BuildCommandResult> {
  await writeFile(path.join(cmd.bundleDir, 'config.json'), JSON.stringify(buildSpec(cmd), null, 1));
  const child = runsc.spawn(['run', '--bundle', cmd.bundleDir, cmd.containerId], ['--network', cmd.network, '--overlay2', 'none'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const tail: string[] = [];
  const out = new LineSplitter((l) => cmd.onLine('stdout', l), tail);
  const err = new LineSplitter((l) => cmd.onLine('stderr', l), tail);
  child.stdout!.on('data', (d: Buffer) => out.push(d));
  child.stderr!.on('data', (d: Buffer) => err.push(d));
  let aborted = false;
  const onAbort = () => {
    aborted = true;
    // Deleting the container ends the `runsc run` that waits on it.
    void runsc.run(['delete', '--force', cmd.containerId], 30_000).catch(() => child.kill('SIGKILL'));
  };
  cmd.signal.addEventListener('abort', onAbort, { once: true });
  const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
    child.on('error', (e) => {
      tail.push(`cannot start runsc: ${e.message}`);
      resolve([null, null]);
    });
    child.on('close', (code, sig) => resolve([code, sig]));
  });
  cmd.signal.removeEventListener('abort', onAbort);
  out.end();
  err.end();
  return { exitCode, signal, tail, aborted };
}

/**
 * Variables that point TLS clients at the host's CA bundle, mounted in GUEST_LIB_DIR (an empty
 * directory in every template, filled only in sandboxes): openssl and curl, git, node, npm,
 * pip. A recipe's own env steps override them.
 */
function trustEnv(caFile: string): Record<string, string> {
  const vars = ['SSL_CERT_FILE', 'CURL_CA_BUNDLE', 'GIT_SSL_CAINFO', 'NODE_EXTRA_CA_CERTS', 'npm_config_cafile', 'PIP_CERT', 'REQUESTS_CA_BUNDLE'];
  return Object.fromEntries(vars.map((v) => [v, caFile]));
}

function buildSpec(cmd: BuildCommand): Record<string, unknown> {
  const root = cmd.user.uid === 0;
  const trustDir = existsSync(path.join(cmd.rootfs, GUEST_LIB_DIR.slice(1))) ? cmd.hostFiles.buildTrust() : undefined;
  const env = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: cmd.user.home,
    LANG: 'C.UTF-8',
    ...(trustDir ? trustEnv(`${GUEST_LIB_DIR}/${BUILD_CA_FILE}`) : {}),
    ...cmd.env,
  };
  const mounts: Array<Record<string, unknown>> = [
    { destination: '/proc', type: 'proc', source: 'proc' },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
    { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
    { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
  ];
  // Bind mounts only over files the template already has: runsc would otherwise create the
  // mount point, and it would end up in the layer.
  // Never the host's own files: their copies in the read-only guest view (security.md).
  const resolvConf = existsSync(path.join(cmd.rootfs, 'etc/resolv.conf')) ? cmd.hostFiles.resolvConf() : undefined;
  if (resolvConf) mounts.push({ destination: '/etc/resolv.conf', type: 'bind', source: resolvConf, options: ['rbind', 'ro'] });
  if (trustDir) mounts.push({ destination: GUEST_LIB_DIR, type: 'bind', source: trustDir, options: ['rbind', 'ro'] });
  if (existsSync(path.join(cmd.rootfs, GUEST_NODE_PATH.slice(1)))) {
    mounts.push({ destination: GUEST_NODE_PATH, type: 'bind', source: cmd.hostFiles.node, options: ['rbind', 'ro'] });
  }
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: cmd.user.uid, gid: cmd.user.gid, additionalGids: cmd.user.additionalGids },
      args: ['/bin/sh', '-c', cmd.script],
      env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      cwd: cmd.cwd,
      // A non-root step gets no capabilities, as a non-root user would have (setuid
      // binaries can still raise them within the bounding set).
      capabilities: {
        bounding: SANDBOX_CAPABILITIES,
        effective: root ? SANDBOX_CAPABILITIES : [],
        permitted: root ? SANDBOX_CAPABILITIES : [],
      },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1048576, soft: 1048576 }],
      noNewPrivileges: false,
    },
    root: { path: cmd.rootfs, readonly: false },
    hostname: 'sandbox',
    mounts,
    linux: {
      // No network namespace: --network=host shares the host's, which apt needs; with
      // --network=none runsc gives the sandbox a loopback of its own and nothing else.
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
    },
  };
}
