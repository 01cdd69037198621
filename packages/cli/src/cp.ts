/** `warren cp SRC DST`: copy a file between host and sandbox; `ID:/path` marks the sandbox side. */
import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { Sandbox } from '@warren/sdk';

interface Side {
  sandbox?: string;
  path: string;
}

export function parseSide(arg: string): Side {
  const [, sandbox, path] = /^(sb-[a-z0-9]+):(.+)$/.exec(arg) ?? [];
  return sandbox && path ? { sandbox, path } : { path: arg };
}

/** Both sides of a copy; exactly one must be in a sandbox. */
export function parseSides(src: string, dst: string): { from: Side; to: Side } {
  const from = parseSide(src);
  const to = parseSide(dst);
  if (from.sandbox && to.sandbox) throw new Error('copy between two sandboxes is not supported; copy through the host');
  if (!from.sandbox && !to.sandbox) throw new Error('one side must be a sandbox path, written ID:/path');
  return { from, to };
}

export async function copy(src: string, dst: string, user?: string): Promise<number> {
  const { from, to } = parseSides(src, dst);
  if (to.sandbox) {
    const st = await stat(from.path);
    if (!st.isFile()) throw new Error(`${from.path} is not a regular file`);
    const sbx = await Sandbox.connect(to.sandbox);
    const r = await sbx.files.write(to.path, createReadStream(from.path), { user, mode: st.mode & 0o777 });
    return r.size;
  }
  const sbx = await Sandbox.connect(from.sandbox!);
  const stream = await sbx.files.readStream(from.path, { user });
  let bytes = 0;
  stream.on('data', (c: Buffer) => (bytes += c.length));
  await pipeline(stream, to.path === '-' ? process.stdout : createWriteStream(to.path));
  return bytes;
}
