/** Daemon configuration from flags and environment, with the on-disk layout under home. */
import type { TlsSetting } from './api/tls.js';
import path from 'node:path';
import { DEFAULT_MAX_FORK_COUNT, MAX_POOL_SIZE, WarrenError } from '@warren/protocol';
import { BAKE_MODES, type BakeMode } from './core/bake.js';
import { checkAllow } from './network/presets.js';
import { parseDnsServers } from './network/resolver.js';
import { LOCAL_PORT_DOMAIN } from './network/ports.js';
import { DEFAULT_RUNSC_CACHE } from './drivers/gvisor/runsc-binary.js';

export const DEFAULT_HOME = '/var/lib/warren';
export const DEFAULT_PORT = 7070;

export interface DaemonConfig {
  home: string;
  host: string;
  port: number;
  /**
   * The runsc binary to use instead of choosing one (WARREN_RUNSC); absent: the patched build
   * if it passes its self-check, else the packaged runsc (drivers/gvisor/runsc-binary.ts).
   */
  runscBinary?: string;
  /** Where scripts/build-runsc.sh installs patched runsc builds (WARREN_RUNSC_CACHE). */
  runscCache: string;
  /** Interval of the TTL reaper. */
  reapIntervalMs: number;
  /** Where built templates live; default <home>/templates (tests share one build). */
  templatesDir: string;
  /** Warm-pool members are reclaimed while the host has less memory available than this. */
  poolMinFreeMB: number;
  /**
   * Which templates are baked, so that creates restore an image (WARREN_BAKE: `all`, the
   * default; `start`: only templates with a start command; `0`: none).
   */
  bake: BakeMode;
  /**
   * Warm-pool size of the default template (`base`) unless one was set with `warren pool`
   * (WARREN_DEFAULT_POOL; 0 turns it off). Undefined: sized by the host's free memory at
   * start (core/default-pool.ts).
   */
  defaultPool?: number;
  /**
   * Boot warm-pool members at a low host CPU weight (WARREN_POOL_BACKGROUND, default 1; 0
   * only to measure what that buys).
   */
  poolBackground: boolean;
  /** Most children one fork may ask for (WARREN_MAX_FORK). */
  maxForkCount: number;
  /** TLS for the API (docs/security.md, "Remote access"); absent: plain HTTP. */
  tls?: TlsSetting;
  /** Plain HTTP beyond loopback, knowingly (--insecure). */
  insecure: boolean;
  /** Days the audit logs (the API's trail and the egress log) keep an entry (WARREN_AUDIT_RETENTION_DAYS, default 90). */
  auditRetentionDays: number;
  /** Failed authentications one address may make in 60 s before it gets 429 (WARREN_AUTH_FAILURES_PER_MINUTE, default 30). */
  authFailuresPerMinute: number;
  /**
   * The domain of port URLs, `<port>-<sandbox>.<domain>` (WARREN_PORT_DOMAIN, default
   * localhost): for a daemon reached from other machines, one whose every name leads to it.
   */
  portDomain: string;
  /**
   * runsc containers created ahead, per template shape, for restores to fill (WARREN_SHELLS,
   * default 2; 0 turns them off): drivers/gvisor/shells.ts.
   */
  shellsPerShape: number;
  /** USD per vCPU-hour a running sandbox has allocated (usage reports, core/usage.ts). */
  priceVcpuHour: number;
  /** USD per GiB-hour of memory a running sandbox has allocated. */
  priceGibHour: number;
  /**
   * DNS servers the egress proxy asks (WARREN_EGRESS_DNS_SERVER, `IP[:PORT]`, comma-separated)
   * instead of the host's resolver; network/resolver.ts.
   */
  egressDnsServers?: string[];
  /**
   * A PEM file of extra CAs the egress proxy trusts, besides the system store, when it
   * connects to a credential host over TLS (WARREN_EGRESS_UPSTREAM_CA): a private server, or
   * a test's own HTTPS server.
   */
  egressUpstreamCaFile?: string;
  /**
   * The egress policy of sandboxes whose create request and template give none
   * (WARREN_DEFAULT_ALLOW: rules and presets, comma-separated); absent: they reach nothing.
   */
  defaultAllow?: string[];
}

const DEFAULT_PRICE_VCPU_HOUR = 0.054;
const DEFAULT_PRICE_GIB_HOUR = 0.0162;

export function resolveConfig(overrides: Partial<DaemonConfig> = {}): DaemonConfig {
  const env = process.env;
  return {
    home: path.resolve(overrides.home ?? env.WARREN_HOME ?? DEFAULT_HOME),
    host: overrides.host ?? env.WARREN_HOST ?? '127.0.0.1',
    port: overrides.port ?? (env.WARREN_PORT ? Number(env.WARREN_PORT) : DEFAULT_PORT),
    runscBinary: overrides.runscBinary ?? (env.WARREN_RUNSC || undefined),
    runscCache: path.resolve(overrides.runscCache ?? (env.WARREN_RUNSC_CACHE || DEFAULT_RUNSC_CACHE)),
    reapIntervalMs: overrides.reapIntervalMs ?? 1000,
    bake: overrides.bake ?? bakeMode(env.WARREN_BAKE),
    poolBackground: overrides.poolBackground ?? flag('WARREN_POOL_BACKGROUND', env.WARREN_POOL_BACKGROUND, true),
    defaultPool: 'defaultPool' in overrides ? overrides.defaultPool : poolSize(env.WARREN_DEFAULT_POOL),
    maxForkCount: overrides.maxForkCount ?? positiveInteger('WARREN_MAX_FORK', env.WARREN_MAX_FORK, DEFAULT_MAX_FORK_COUNT),
    ...(overrides.tls ? { tls: overrides.tls } : {}),
    insecure: overrides.insecure ?? false,
    auditRetentionDays: overrides.auditRetentionDays ?? positiveInteger('WARREN_AUDIT_RETENTION_DAYS', env.WARREN_AUDIT_RETENTION_DAYS, 90),
    authFailuresPerMinute: overrides.authFailuresPerMinute ?? positiveInteger('WARREN_AUTH_FAILURES_PER_MINUTE', env.WARREN_AUTH_FAILURES_PER_MINUTE, 30),
    portDomain: overrides.portDomain ?? portDomain(env.WARREN_PORT_DOMAIN),
    shellsPerShape: overrides.shellsPerShape ?? nonNegativeInteger('WARREN_SHELLS', env.WARREN_SHELLS, 2),
    poolMinFreeMB: overrides.poolMinFreeMB ?? (env.WARREN_POOL_MIN_FREE_MB ? Number(env.WARREN_POOL_MIN_FREE_MB) : 1024),
    priceVcpuHour: overrides.priceVcpuHour ?? price(env, 'WARREN_PRICE_VCPU_HOUR', DEFAULT_PRICE_VCPU_HOUR),
    priceGibHour: overrides.priceGibHour ?? price(env, 'WARREN_PRICE_GIB_HOUR', DEFAULT_PRICE_GIB_HOUR),
    egressDnsServers: overrides.egressDnsServers ?? (env.WARREN_EGRESS_DNS_SERVER ? parseDnsServers(env.WARREN_EGRESS_DNS_SERVER) : undefined),
    egressUpstreamCaFile: overrides.egressUpstreamCaFile ?? (env.WARREN_EGRESS_UPSTREAM_CA ? path.resolve(env.WARREN_EGRESS_UPSTREAM_CA) : undefined),
    defaultAllow: overrides.defaultAllow ?? defaultAllow(env.WARREN_DEFAULT_ALLOW),
    templatesDir: path.resolve(overrides.templatesDir ?? env.WARREN_TEMPLATES ?? path.join(overrides.home ?? env.WARREN_HOME ?? DEFAULT_HOME, 'templates')),
  };
}

/** WARREN_DEFAULT_ALLOW as a list, checked: a typo must stop the daemon, not open or close egress by surprise. */
export function defaultAllow(text: string | undefined): string[] | undefined {
  if (text === undefined || text.trim() === '') return undefined;
  const rules = text
    .split(',')
    .map((r) => r.trim())
    .filter(Boolean);
  checkAllow(rules, 'WARREN_DEFAULT_ALLOW');
  return rules;
}

/** WARREN_BAKE: a typo must stop the daemon, not silently bake everything or nothing. */
function bakeMode(text: string | undefined): BakeMode {
  if (text === undefined || text === '' || text === '1') return 'all';
  if (text === '0') return 'off';
  if ((BAKE_MODES as readonly string[]).includes(text)) return text as BakeMode;
  throw new WarrenError('invalid_argument', `WARREN_BAKE must be all (the default), start or 0 (got '${text}')`);
}

function flag(name: string, text: string | undefined, fallback: boolean): boolean {
  if (text === undefined || text === '') return fallback;
  if (text === '0' || text === '1') return text === '1';
  throw new WarrenError('invalid_argument', `${name} must be 0 or 1 (got '${text}')`);
}

/** WARREN_DEFAULT_POOL as a size; absent or empty: undefined (sized by free memory). */
function poolSize(text: string | undefined): number | undefined {
  if (text === undefined || text.trim() === '') return undefined;
  const n = Number(text);
  if (!/^\s*\d+\s*$/.test(text) || n > MAX_POOL_SIZE)
    throw new WarrenError(
      'invalid_argument',
      `WARREN_DEFAULT_POOL must be a whole number from 0 to ${MAX_POOL_SIZE} (0 turns the default pool off; got '${text}')`,
    );
  return n;
}

/** A price from the environment; a typo must stop the daemon, not bill at NaN or at the default. */
function price(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const text = env[name];
  if (text === undefined || text.trim() === '') return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) throw new WarrenError('invalid_argument', `${name} must be a non-negative number (USD per hour), got '${text}'`);
  return value;
}

const DOMAIN_NAME = /^(?=.{1,200}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

function portDomain(text: string | undefined): string {
  if (text === undefined || text === '') return LOCAL_PORT_DOMAIN;
  const domain = text.trim().toLowerCase();
  if (!DOMAIN_NAME.test(domain))
    throw new WarrenError('invalid_argument', `WARREN_PORT_DOMAIN must be a DNS name such as sandboxes.example.com (got '${text}')`);
  return domain;
}

function positiveInteger(name: string, text: string | undefined, fallback: number): number {
  return integerAtLeast(1, name, text, fallback);
}

function nonNegativeInteger(name: string, text: string | undefined, fallback: number): number {
  return integerAtLeast(0, name, text, fallback);
}

function integerAtLeast(min: number, name: string, text: string | undefined, fallback: number): number {
  if (text === undefined || text === '') return fallback;
  const n = Number(text);
  if (!Number.isInteger(n) || n < min)
    throw new WarrenError('invalid_argument', `${name} must be ${min === 1 ? 'a positive' : 'a non-negative'} integer (got '${text}')`);
  return n;
}

export function layout(home: string) {
  return {
    db: path.join(home, 'warren.db'),
    adminKey: path.join(home, 'admin.key'),
    lockSocket: path.join(home, 'daemon.sock'),
    /** The daemon's structured log, searched by GET /v1/logs (rotated to warrend.log.1). */
    logFile: path.join(home, 'warrend.log'),
    runscRoot: path.join(home, 'runsc'),
    sandboxes: path.join(home, 'sandboxes'),
    /** Containers created ahead for restores (drivers/gvisor/shells.ts). */
    shells: path.join(home, 'shells'),
    /** The daemon's copies of the files sandboxes mount (storage/sandbox-host-files.ts). */
    guest: path.join(home, 'guest'),
    /** Read-only views of guest/ and the templates dir: all a sandbox sees of the host. */
    views: path.join(home, 'views'),
    pools: path.join(home, 'pools.json'),
    bakes: path.join(home, 'bakes'),
    /** Saved machines: hibernated sandboxes, snapshots, and the short-lived images of forks. */
    images: path.join(home, 'images'),
    /** Signs port URLs (network/ports.ts). */
    portSecret: path.join(home, 'port.secret'),
    /** Per-sandbox CAs for credential brokering (network/ca.ts); keys never leave the host. */
    egressCa: path.join(home, 'egress-ca'),
  };
}
