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
}

export function resolveConfig(overrides: Partial<DaemonConfig> = {}): DaemonConfig {
  const env = process.env;
  return {
    home: path.resolve(overrides.home ?? env.WARREN_HOME ?? DEFAULT_HOME),
    host: overrides.host ?? env.WARREN_HOST ?? '127.0.0.1',
    port: overrides.port ?? (env.WARREN_PORT ? Number(env.WARREN_PORT) : DEFAULT_PORT),
    runscBinary: overrides.runscBinary ?? env.WARREN_RUNSC ?? 'runsc',
    reapIntervalMs: overrides.reapIntervalMs ?? 1000,
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
  };
}
