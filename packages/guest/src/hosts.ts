/**
 * The agent's block of /etc/hosts: the names of TCP forwarders and their loopback addresses
 * (forwards.ts). Only the lines between the markers are the agent's; everything else in the
 * file belongs to the sandbox and is kept as it is, byte for byte.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { FORWARD_NETWORK_PREFIX, HOSTS_BLOCK_BEGIN, HOSTS_BLOCK_END } from '@warren/protocol/wire';

export const HOSTS_FILE = '/etc/hosts';

/** `text` with its managed block replaced by `entries` (address, name), or removed if none. */
export function withManagedBlock(text: string, entries: Array<{ address: string; name: string }>): string {
  const lines = text === '' ? [] : text.replace(/\n$/, '').split('\n');
  const kept: string[] = [];
  let block: string[] | undefined;
  for (const line of lines) {
    if (line === HOSTS_BLOCK_BEGIN) block = [];
    else if (line === HOSTS_BLOCK_END) block = undefined;
    else if (block) block.push(line);
    else kept.push(line);
  }
  // A begin marker without its end (someone cut the file): of what follows it, only lines
  // that look like ours are dropped, so the sandbox's own lines survive.
  if (block) kept.push(...block.filter((line) => !line.startsWith(FORWARD_NETWORK_PREFIX)));
  if (entries.length) kept.push(HOSTS_BLOCK_BEGIN, ...entries.map((e) => `${e.address}\t${e.name}`), HOSTS_BLOCK_END);
  return kept.length ? `${kept.join('\n')}\n` : '';
}

/**
 * Rewrites the block in `file`. Written to a temporary file and renamed, so a resolver never
 * reads half a file. The base template has no /etc/hosts: it is created then.
 */
export function writeManagedBlock(entries: Array<{ address: string; name: string }>, file = HOSTS_FILE): void {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const next = withManagedBlock(text, entries);
  if (next === text) return;
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.warren-tmp`);
  writeFileSync(tmp, next, { mode: 0o644 });
  renameSync(tmp, file);
}
