/** Builds the OCI runtime spec for one sandbox. */
import type { StartSpec } from '../driver.js';

export const GUEST_NODE_PATH = '/opt/warren/bin/node';
export const GUEST_LIB_DIR = '/opt/warren/lib';
export const AGENT_FILE = 'agent.cjs';
export const INIT_FILE = 'warren-init';
export const AGENT_PATH = `${GUEST_LIB_DIR}/${AGENT_FILE}`;
/** The name of CONNECT_HELPER_PATH (@warren/protocol) in the guest lib dir. */
export const CONNECT_HELPER_FILE = 'connect';
/** The name of PTY_HELPER_PATH (@warren/protocol) in the guest lib dir: terminals' helper. */
export const PTY_HELPER_FILE = 'warren-pty';
const INIT_PATH = `${GUEST_LIB_DIR}/${INIT_FILE}`;

// Docker's default set plus SYS_PTRACE (debuggers and strace work inside). NET_RAW is left
// out on purpose: raw sockets are an egress bypass. These capabilities act on the
// sandbox's own kernel (the gVisor Sentry), never on the host's. Build steps get the same.
export const SANDBOX_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
  'CAP_SYS_PTRACE',
];

// Held by warren-init only, to set the hostname of a restored sandbox (SYS_ADMIN) and to give
// loopback a second address at boot (NET_ADMIN): it drops both from the bounding set of the
// agent and of every command it starts.
const INIT_CAPABILITIES = [...SANDBOX_CAPABILITIES, 'CAP_SYS_ADMIN', 'CAP_NET_ADMIN'];

/**
 * cgroup v1 cpu.shares of a sandbox booted in the background (StartSpec.background) and of
 * every other one (the kernel's default). Shares only count when the CPU is contended: an
 * idle host still gives a background boot all it asks for, a busy one gives the sandboxes
 * serving requests 1024/(1024+16) of what the two compete for.
 */
export const BACKGROUND_CPU_SHARES = 16;
export const NORMAL_CPU_SHARES = 1024;

export interface BundleInputs extends StartSpec {
  hostNodeBinary: string;
  hostGuestLibDir: string;
  cgroupsPath: string;
  /**
   * Host-level task cap: a backstop above the in-sandbox limit (RLIMIT_NPROC, set by the
   * agent), protecting the host. Measured: a fork bomb held at 128 guest processes used about
   * 330 host tasks (systrap stubs and Sentry threads), hence the factor of 4 plus headroom.
   */
  hostPidsLimit: number;
}

export function buildSpec(input: BundleInputs): Record<string, unknown> {
  const { resources } = input;
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      // warren-init reaps orphans and starts commands for the agent (packages/guest/native).
      args: [INIT_PATH, GUEST_NODE_PATH, AGENT_PATH, 'serve'],
      env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'HOME=/root', 'LANG=C.UTF-8'],
      cwd: '/',
      capabilities: {
        bounding: INIT_CAPABILITIES,
        effective: INIT_CAPABILITIES,
        permitted: INIT_CAPABILITIES,
      },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1048576, soft: 1048576 }],
      noNewPrivileges: false,
    },
    root: { path: input.rootfs, readonly: false },
    hostname: input.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: GUEST_NODE_PATH, type: 'bind', source: input.hostNodeBinary, options: ['rbind', 'ro'] },
      { destination: GUEST_LIB_DIR, type: 'bind', source: input.hostGuestLibDir, options: ['rbind', 'ro'] },
    ],
    linux: {
      cgroupsPath: input.cgroupsPath,
      resources: {
        memory: { limit: resources.memoryMB * 1024 * 1024 },
        cpu: {
          quota: Math.round(resources.cpus * 100_000),
          period: 100_000,
          ...(input.background ? { shares: BACKGROUND_CPU_SHARES } : {}),
        },
        pids: { limit: input.hostPidsLimit },
      },
      namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
    },
  };
}
