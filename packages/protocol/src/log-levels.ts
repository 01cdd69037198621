/**
 * Log levels of the daemon's structured log, lowest first (pino's names). In a module of
 * their own, without zod: the CLI's bundle takes them from here, and a module that builds
 * schemas at load (api.ts) would bring all of zod into every CLI start.
 */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
