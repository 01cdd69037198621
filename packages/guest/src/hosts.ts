/**
 * The agent's lines in /etc/hosts. Its block: the names of TCP forwarders and their loopback
 * addresses (forwards.ts); only the lines between the markers are the agent's. And the
 * loopback names every system is expected to have, which a minbase root filesystem lacks
 * (Docker writes them into each container's /etc/hosts alike): `localhost`, unless the file
 * names it, and the sandbox's hostname, on a line of its own that follows hostname changes.
 * Everything else in the file belongs to the sandbox and is kept as it is, byte for byte.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { FORWARD_NETWORK_PREFIX, HOSTS_BLOCK_BEGIN, HOSTS_BLOCK_END } from '@warren/protocol/wire';

const HOSTS_FILE = '/etc/hosts';

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
 * Ends the agent's line for the sandbox's hostname, so that line can be found again. Its
 * address, 127.0.1.1, is also on loopback itself: warren-init adds it at boot (init.c).
 */
const HOSTNAME_MARK = '# warren: the sandbox hostname';
const HOSTNAME = /^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/;

/**
 * `text` with `localhost` (if no line names it) and `hostname` (if no other line names it) on
 * loopback. The hostname line is replaced where it stands; new lines go first.
 */
export function withLoopbackNames(text: string, hostname: string): string {
  const lines = text === '' ? [] : text.replace(/\n$/, '').split('\n');
  const others = lines.filter((line) => !line.endsWith(HOSTNAME_MARK));
  const named = (name: string) => others.some((line) => line.replace(/#.*/, '').trim().split(/\s+/).slice(1).includes(name));
  const hostLine = HOSTNAME.test(hostname) && !named(hostname) ? [`127.0.1.1\t${hostname}\t${HOSTNAME_MARK}`] : [];
  const ours = lines.findIndex((line) => line.endsWith(HOSTNAME_MARK));
  const kept = ours < 0 ? [...hostLine, ...others] : lines.flatMap((line, i) => (i === ours ? hostLine : line.endsWith(HOSTNAME_MARK) ? [] : [line]));
  const localhost = named('localhost') ? [] : ['127.0.0.1\tlocalhost', '::1\tlocalhost ip6-localhost ip6-loopback'];
  return `${[...localhost, ...kept].join('\n')}\n`;
}

/** Rewrites the managed block in `file`. */
export function writeManagedBlock(entries: Array<{ address: string; name: string }>, file = HOSTS_FILE): void {
  rewriteHosts(file, (text) => withManagedBlock(text, entries));
}

/** Makes `localhost` and the sandbox's hostname resolve (withLoopbackNames). */
export function writeLoopbackNames(hostname: string, file = HOSTS_FILE): void {
  rewriteHosts(file, (text) => withLoopbackNames(text, hostname));
}

/**
 * Written to a temporary file and renamed, so a resolver never reads half a file. The base
 * template has no /etc/hosts: it is created then.
 */
function rewriteHosts(file: string, change: (text: string) => string): void {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const next = change(text);
  if (next === text) return;
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.warren-tmp`);
  writeFileSync(tmp, next, { mode: 0o644 });
  renameSync(tmp, file);
}
