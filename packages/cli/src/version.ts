/**
 * The CLI's version (`warren --version`), from its package.json. The bundle replaces this
 * module with the version as a constant (bundle.mjs), so a one-shot command reads no file.
 */
import { readFileSync } from 'node:fs';

export function cliVersion(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}
