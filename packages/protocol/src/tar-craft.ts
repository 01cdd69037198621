/**
 * Byte-level tar building for tests: headers with any field set to anything (a checksum that
 * still matches, so the bytes reach the parsers), pax and GNU long-name records, and seeded
 * mutations of the headers of valid archives. Used by the tests of the tar checks (the checker's
 * own, the SDK's differential test, the hostile-tar end-to-end test); nothing here writes real
 * archives.
 */

export const BLOCK = 512;

/** A seeded generator (mulberry32): the same seed gives the same corpus on every run. */
export function rng(seed: number): { next: () => number; int: (n: number) => number; pick: <T>(xs: readonly T[]) => T } {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)] as (typeof xs)[number] };
}

export interface HeaderFields {
  name?: string | Buffer;
  mode?: number;
  size?: number;
  type?: string;
  linkname?: string | Buffer;
  /** 'posix' (ustar\0 00), 'gnu' (ustar  \0), or the 8 raw bytes at 257. */
  magic?: 'posix' | 'gnu' | string;
  prefix?: string | Buffer;
  /** Raw bytes written last at their offsets (before the checksum). */
  raw?: Array<[number, Buffer | string]>;
}

function octal(value: number, width: number): string {
  return `${value.toString(8).padStart(width - 1, '0')}\0`;
}

/** Writes the unsigned checksum of `h` into it. */
export function sealChecksum(h: Buffer): Buffer {
  h.write('        ', 148, 8, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return h;
}

export function header(f: HeaderFields): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = (v: string | Buffer, at: number, len: number) => (typeof v === 'string' ? h.write(v, at, len, 'utf8') : v.copy(h, at, 0, len));
  put(f.name ?? '', 0, 100);
  h.write(octal(f.mode ?? 0o644, 8), 100, 'latin1');
  h.write(octal(0, 8), 108, 'latin1');
  h.write(octal(0, 8), 116, 'latin1');
  h.write(octal(f.size ?? 0, 12), 124, 'latin1');
  h.write(octal(1_700_000_000, 12), 136, 'latin1');
  h.write(f.type ?? '0', 156, 1, 'latin1');
  put(f.linkname ?? '', 157, 100);
  const magic = f.magic ?? 'posix';
  h.write(magic === 'posix' ? 'ustar\x0000' : magic === 'gnu' ? 'ustar  \x00' : magic, 257, 8, 'latin1');
  if (magic === 'posix') {
    h.write(octal(0, 8), 329, 'latin1');
    h.write(octal(0, 8), 337, 'latin1');
  }
  if (f.prefix) put(f.prefix, 345, 155);
  for (const [at, bytes] of f.raw ?? []) put(bytes, at, BLOCK - at);
  return sealChecksum(h);
}

function padding(n: number): Buffer {
  return Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);
}

/** A header and its data, padded; `size` defaults to the data's length. */
export function member(f: HeaderFields, data: Buffer | string = ''): Buffer {
  const body = Buffer.from(data);
  return Buffer.concat([header({ size: body.length, ...f }), body, padding(body.length)]);
}

/** One pax record, its length counting itself. */
export function paxRecord(key: string, value: string | Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), Buffer.from(value), Buffer.from('\n')]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len)), body]);
}

/** A pax extended ('x') or global ('g') header with these records (raw Buffers go in as they are). */
export function pax(records: Array<[string, string | Buffer] | Buffer>, kind: 'x' | 'g' = 'x'): Buffer {
  const data = Buffer.concat(records.map((r) => (Buffer.isBuffer(r) ? r : paxRecord(r[0], r[1]))));
  return member({ name: '././@PaxHeader', type: kind }, data);
}

/** A GNU long name ('L') or long link name ('K') record; `data` as given, NUL-terminated by default. */
export function gnuLong(kind: 'L' | 'K', name: string | Buffer, terminate = true): Buffer {
  const data = Buffer.concat([Buffer.from(name), Buffer.from(terminate ? '\0' : '')]);
  return member({ name: '././@LongLink', type: kind, magic: 'gnu' }, data);
}

export const END = Buffer.alloc(2 * BLOCK);

/** Offsets of the headers of a well-formed archive (up to its first zero block). */
function headerOffsets(archive: Buffer): number[] {
  const out: number[] = [];
  for (let at = 0; at + BLOCK <= archive.length; ) {
    const h = archive.subarray(at, at + BLOCK);
    if (h.every((b) => b === 0)) break;
    out.push(at);
    const sizeField = h.subarray(124, 136);
    const size = sizeField[0] === 0x80 ? sizeField.subarray(1).reduce((v, b) => v * 256 + b, 0) : parseInt(sizeField.toString('latin1'), 8) || 0;
    const type = String.fromCharCode(h[156] ?? 0);
    at += BLOCK + (['1', '2', '5'].includes(type) ? 0 : Math.ceil(size / BLOCK) * BLOCK);
  }
  return out;
}

/** Interesting bytes to put into a header field. */
const BYTES = [0x00, 0x20, 0x2f, 0x2e, 0x30, 0x31, 0x35, 0x37, 0x78, 0x0a, 0x80, 0xff, 0x4c, 0x67];
const TYPES = ['0', '\0', '1', '2', '3', '5', '6', '7', 'x', 'g', 'L', 'K', 'S', 'D', 'V', 'N', 'M', 'A', 'Z'];
/** Header fields: [offset, length]. */
const FIELDS: Array<[number, number]> = [
  [0, 100],
  [100, 8],
  [124, 12],
  [136, 12],
  [156, 1],
  [157, 100],
  [257, 8],
  [345, 155],
];

/** A copy of `archive` with one header changed at random (its checksum resealed), and what was done. */
export function mutate(archive: Buffer, r: ReturnType<typeof rng>): { bytes: Buffer; what: string } {
  const out = Buffer.from(archive);
  const offsets = headerOffsets(out);
  const at = r.pick(offsets);
  const h = out.subarray(at, at + BLOCK);
  const op = r.int(6);
  let what: string;
  if (op === 0) {
    h[156] = r.pick(TYPES).charCodeAt(0);
    what = `type ${JSON.stringify(String.fromCharCode(h[156] ?? 0))}`;
  } else if (op === 1) {
    const size = r.pick([0, 1, 511, 512, 513, 1024, 4096, r.int(1 << 20)]);
    h.write(octal(size, 12), 124, 'latin1');
    what = `size ${size}`;
  } else if (op === 2) {
    const magic = r.pick(['ustar\x0000', 'ustar  \x00', 'ustar\x000\x00', 'ustar\x00  ', '\0\0\0\0\0\0\0\0', 'ustar \x00 ']);
    h.write(magic, 257, 8, 'latin1');
    what = `magic ${JSON.stringify(magic)}`;
  } else if (op === 3) {
    const name = r.pick(['x/', 's1', 'x/up', 'a/../b', './', '/abs', 'a//b', 'a/.', 'dir/', 'f\0\nz']);
    h.fill(0, 0, 100);
    h.write(name, 0, 100, 'latin1');
    what = `name ${JSON.stringify(name)}`;
  } else if (op === 4) {
    const link = r.pick(['', '..', 'x/up/..', '/etc', 'f', 'x']);
    h.fill(0, 157, 257);
    h.write(link, 157, 100, 'latin1');
    what = `linkname ${JSON.stringify(link)}`;
  } else {
    const [start, length] = r.pick(FIELDS);
    const i = start + r.int(length);
    h[i] = r.pick(BYTES);
    what = `byte ${i} = 0x${(h[i] ?? 0).toString(16)}`;
  }
  sealChecksum(h);
  return { bytes: out, what: `header at ${at}: ${what}` };
}
