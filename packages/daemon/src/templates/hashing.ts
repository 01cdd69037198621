/** Cache keys: sha256 over canonical JSON, and over the content of a copy step's source. */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** JSON with object keys sorted, so equal values always hash the same. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

/** Files up to this size are read whole, several at once; bigger ones are streamed in turn. */
const SMALL_FILE_BYTES = 1 << 20;
/** Small files read ahead of the one being hashed (at most this many MiB in memory). */
const READ_AHEAD = 16;

interface Entry {
  abs: string;
  header: string;
  /** Regular files: their bytes go into the hash after the header. */
  size?: number;
}

/**
 * Hash of a file or directory tree as a copy step would copy it: names, types, permission
 * bits, file bytes and symlink targets (not times or owners: the step sets the owner).
 * Small files are read ahead in parallel (a context of many small files is otherwise one
 * thread-pool round trip per open, read and close in turn: 300 files took about 150 ms).
 */
export async function hashSource(src: string): Promise<string> {
  const entries: Entry[] = [];
  await collect(src, '.', entries);
  const h = createHash('sha256');
  const reads = new Map<number, Promise<Buffer>>();
  let ahead = 0;
  const readAhead = (from: number) => {
    for (ahead = Math.max(ahead, from); reads.size < READ_AHEAD; ahead++) {
      const e = entries[ahead];
      if (e === undefined) break; // past the last entry
      if (e.size === undefined || e.size > SMALL_FILE_BYTES) continue;
      const read = readFile(e.abs);
      // Awaited in turn below; a file that fails before its turn must not count as unhandled.
      read.catch(() => undefined);
      reads.set(ahead, read);
    }
  };
  for (const [i, e] of entries.entries()) {
    readAhead(i);
    h.update(e.header);
    if (e.size === undefined) continue;
    const small = reads.get(i);
    if (small) {
      h.update(await small);
      reads.delete(i);
    } else {
      for await (const chunk of createReadStream(e.abs)) h.update(chunk as Buffer);
    }
  }
  return h.digest('hex');
}

async function collect(abs: string, rel: string, out: Entry[]): Promise<void> {
  const st = await lstat(abs);
  const mode = (st.mode & 0o7777).toString(8);
  if (st.isSymbolicLink()) {
    out.push({ abs, header: `L ${rel} ${await readlink(abs)}\0` });
  } else if (st.isDirectory()) {
    out.push({ abs, header: `D ${rel} ${mode}\0` });
    for (const name of (await readdir(abs)).sort()) await collect(path.join(abs, name), `${rel}/${name}`, out);
  } else if (st.isFile()) {
    out.push({ abs, header: `F ${rel} ${mode} ${st.size}\0`, size: st.size });
  } else {
    out.push({ abs, header: `O ${rel} ${mode} ${st.rdev}\0` });
  }
}
