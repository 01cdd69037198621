/** Cache keys: sha256 over canonical JSON, and over the content of a copy step's source. */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
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

/**
 * Hash of a file or directory tree as a copy step would copy it: names, types, permission
 * bits, file bytes and symlink targets (not times or owners: the step sets the owner).
 */
export async function hashSource(src: string): Promise<string> {
  const h = createHash('sha256');
  await hashEntry(src, '.', h);
  return h.digest('hex');
}

async function hashEntry(abs: string, rel: string, h: ReturnType<typeof createHash>): Promise<void> {
  const st = await lstat(abs);
  const mode = (st.mode & 0o7777).toString(8);
  if (st.isSymbolicLink()) {
    h.update(`L ${rel} ${await readlink(abs)}\0`);
  } else if (st.isDirectory()) {
    h.update(`D ${rel} ${mode}\0`);
    for (const name of (await readdir(abs)).sort()) await hashEntry(path.join(abs, name), `${rel}/${name}`, h);
  } else if (st.isFile()) {
    h.update(`F ${rel} ${mode} ${st.size}\0`);
    for await (const chunk of createReadStream(abs)) h.update(chunk as Buffer);
  } else {
    h.update(`O ${rel} ${mode} ${st.rdev}\0`);
  }
}
