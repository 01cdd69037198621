/** Daemon configuration from flags and environment, with the on-disk layout under home. */
import path from 'node:path';

export const DEFAULT_HOME = '/var/lib/warren';
export const DEFAULT_PORT = 7070;

export interface DaemonConfig {
  home: string;
  host: string;
  port: number;
  runscBinary: string;
  /** Interval of the TTL reaper. */
  reapIntervalMs: number;
  /** Where built templates live; default <home>/templates (tests share one build). */
  templatesDir: string;
  /** Warm-pool members are reclaimed while the host has less memory available than this. */
  poolMinFreeMB: number;
  /** Bake templates and restore creates from the image (WARREN_BAKE=0 turns it off). */
  bake: boolean;
}

export function resolveConfig(overrides: Partial<DaemonConfig> = {}): DaemonConfig {
  const env = process.env;
  return {
    home: path.resolve(overrides.home ?? env.WARREN_HOME ?? DEFAULT_HOME),
    host: overrides.host ?? env.WARREN_HOST ?? '127.0.0.1',
    port: overrides.port ?? (env.WARREN_PORT ? Number(env.WARREN_PORT) : DEFAULT_PORT),
    runscBinary: overrides.runscBinary ?? env.WARREN_RUNSC ?? 'runsc',
    reapIntervalMs: overrides.reapIntervalMs ?? 1000,
    bake: overrides.bake ?? env.WARREN_BAKE !== '0',
    poolMinFreeMB: overrides.poolMinFreeMB ?? (env.WARREN_POOL_MIN_FREE_MB ? Number(env.WARREN_POOL_MIN_FREE_MB) : 1024),
    templatesDir: path.resolve(overrides.templatesDir ?? env.WARREN_TEMPLATES ?? path.join(overrides.home ?? env.WARREN_HOME ?? DEFAULT_HOME, 'templates')),
  };
}

export function layout(home: string) {
  return {
    db: path.join(home, 'warren.db'),
    adminKey: path.join(home, 'admin.key'),
    lockSocket: path.join(home, 'daemon.sock'),
    runscRoot: path.join(home, 'runsc'),
    sandboxes: path.join(home, 'sandboxes'),
    guest: path.join(home, 'guest'),
    pools: path.join(home, 'pools.json'),
    bakes: path.join(home, 'bakes'),
  };
}
