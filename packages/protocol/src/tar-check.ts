/**
 * A streaming check of tar archives, run on every directory transfer before any byte of a
 * member reaches the program that extracts it: inside the sandbox in front of GNU tar
 * (uploads), and on the host in front of node-tar (downloads, where the archive comes from
 * the sandbox and is hostile). It parses the bytes, refuses every framing that two tar readers
 * could read differently, and runs the member rules (tar-members.ts) on what it found.
 *
 * Strict on purpose: GNU tar, node-tar and Python's tarfile each have their own leniencies (a
 * directory header with a size, a `0\0` ustar version with a prefix, a regular file whose name
 * ends in `/`, text after a NUL in a name, a pax value with a newline), and a member one reader
 * sees and another skips is how a link gets past a check. What GNU tar -c (gnu, pax, ustar),
 * the SDK packers and tarfile write passes; the rest is refused. The rule list, shared with the
 * Python SDK's check: docs/api.md, "Directories". It never writes anything.
 */
import { WarrenError } from './errors.js';
import { MEMBER_WORDS, TarMembers, refuseMember, type TarMember, type TarMemberType, type TarSummary } from './tar-members.js';

export * from './tar-members.js';

const BLOCK = 512;
/** Largest pax or GNU long-name record kept whole (names are at most 4096 bytes on Linux). */
const MAX_META_BYTES = 1024 * 1024;
const POSIX_MAGIC = 'ustar\x0000';
const GNU_MAGIC = 'ustar  \x00';
const TYPES: Record<string, TarMemberType> = { '0': 'file', '\0': 'file', '5': 'directory', '2': 'symlink', '1': 'hardlink' };
const META_TYPES = new Set(['x', 'g', 'L', 'K']);
const ZSTD_MAGIC = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
/** Numeric fields every header must hold well formed: mode, uid, gid, size, mtime. */
const NUMBERS: Array<[number, number]> = [
  [100, 8],
  [108, 8],
  [116, 8],
  [124, 12],
];
/** mtime: GNU tar and tarfile write a time before 1970 as negative base-256 (first byte 0xff). */
const MTIME: [number, number] = [136, 12];
const utf8 = new TextDecoder('utf-8', { fatal: true });
/** An octal number field: digits between spaces, then at least one NUL or space (every reader stops there). */
const OCTAL = /^ *([0-7]+)[ \0]+$/;

type State = 'header' | 'body' | 'meta' | 'done';

/** Refusal of the archive as a whole (not one member). */
function refuseArchive(why: string): WarrenError {
  return new WarrenError('invalid_argument', `refused tar archive: ${why}`);
}

function text(bytes: Uint8Array, what: string): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw refuseArchive(`${what} is not UTF-8`);
  }
}

/** A NUL-terminated string field's bytes; nothing but NULs may follow its first NUL. */
function field(block: Uint8Array, start: number, length: number, what: string): Uint8Array {
  const bytes = block.subarray(start, start + length);
  const nul = bytes.indexOf(0);
  if (nul >= 0 && bytes.subarray(nul).some((b) => b !== 0)) throw refuseArchive(`bytes after the end of the ${what}`);
  return nul < 0 ? bytes : bytes.subarray(0, nul);
}

/**
 * Octal digits between spaces, then at least one NUL or space; or base-256 with a first byte of
 * 0x80, or of 0xff (negative) where `negative` allows it; the value of a negative one is not needed.
 */
function number(block: Uint8Array, start: number, length: number, octalOnly = false, negative = false): number {
  const bytes = block.subarray(start, start + length);
  if (negative && bytes[0] === 0xff) return -1;
  if (bytes[0] === 0x80 && !octalOnly) {
    let value = 0;
    for (const b of bytes.subarray(1)) value = value * 256 + b;
    if (!Number.isSafeInteger(value)) throw refuseArchive(`a base-256 number too large at header byte ${start}`);
    return value;
  }
  const s = Buffer.from(bytes).toString('latin1');
  const m = OCTAL.exec(s);
  if (!m) throw refuseArchive(`a malformed number field ${JSON.stringify(s)} at header byte ${start}`);
  return parseInt(m[1] as string, 8);
}

/** The unsigned sum, as every reader computes it (GNU tar and tarfile also accept a signed one). */
function checksumOk(block: Uint8Array): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (block[i] ?? 0);
  // A malformed checksum field is a bad checksum: the block is not a tar header at all.
  return OCTAL.test(Buffer.from(block.subarray(148, 156)).toString('latin1')) && sum === number(block, 148, 8, true);
}

/** Parses pax records ("LEN key=value\n") strictly: the length must frame each record exactly. */
function paxRecords(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let at = 0;
  while (at < data.length) {
    if (data[at] === 0) {
      if (data.subarray(at).some((b) => b !== 0)) throw refuseArchive('bytes after the NULs that end a pax header');
      break;
    }
    const space = data.indexOf(0x20, at);
    const len = space < 0 ? '' : data.subarray(at, space).toString('latin1');
    const end = at + Number(len);
    if (!/^[0-9]+$/.test(len) || end <= space + 1 || end > data.length || data[end - 1] !== 0x0a) throw refuseArchive('a malformed pax record');
    const record = data.subarray(space + 1, end - 1);
    const eq = record.indexOf(0x3d);
    if (eq <= 0) throw refuseArchive('a pax record without a key');
    const key = record.subarray(0, eq).toString('latin1');
    const value = record.subarray(eq + 1);
    if (value.includes(0x0a)) throw refuseArchive(`a newline in the pax value of ${JSON.stringify(key)}`);
    if (out.has(key)) throw refuseArchive(`the pax key ${JSON.stringify(key)} twice in one header`);
    out.set(key, value);
    at = end;
  }
  return out;
}

/** What pax and GNU headers said about the next member. */
interface Pending {
  kinds: Set<string>;
  path?: string;
  linkpath?: string;
  size?: number;
}

export class TarChecker {
  private state: State = 'header';
  private header = Buffer.alloc(BLOCK);
  private headerFill = 0;
  /** Bytes of the current body (with padding) still to come. */
  private remaining = 0;
  private meta: Buffer[] = [];
  private metaKind = '';
  private metaSize = 0;
  private metaStart = 0;
  private offset = 0;
  private next: Pending = { kinds: new Set() };
  private members = new TarMembers();
  private count = 0;

  /** `onMember` sees each member the checker accepted, in order (sdk dirs.ts compares them with node-tar's). */
  constructor(private readonly onMember?: (m: TarMember) => void) {}

  /**
   * Where the body of the metadata record being read starts in the stream, or undefined when
   * none is: the host holds those bytes back so that node-tar gets each record in one piece (it
   * decodes every piece as UTF-8 on its own, which mangles a character cut in two).
   */
  get openMetaAt(): number | undefined {
    return this.state === 'meta' ? this.metaStart : undefined;
  }

  /** Checks the next bytes of the archive; throws on the first refused member or bad block. */
  push(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.state === 'done') {
        for (let i = at; i < chunk.length; i++) {
          if (chunk[i] !== 0) throw refuseArchive(`data after its end-of-archive block (byte ${this.offset + i - at})`);
        }
        this.offset += chunk.length - at;
        return;
      }
      if (this.state === 'body' || this.state === 'meta') {
        const n = Math.min(this.remaining, chunk.length - at);
        if (this.state === 'meta') this.meta.push(Buffer.from(chunk.subarray(at, at + n)));
        this.remaining -= n;
        at += n;
        this.offset += n;
        if (this.remaining === 0) {
          if (this.state === 'meta') this.finishMeta();
          this.state = 'header';
        }
        continue;
      }
      const n = Math.min(BLOCK - this.headerFill, chunk.length - at);
      this.header.set(chunk.subarray(at, at + n), this.headerFill);
      this.headerFill += n;
      at += n;
      this.offset += n;
      if (this.headerFill === BLOCK) {
        this.headerFill = 0;
        this.onHeader(this.header);
      }
    }
  }

  /** After the last byte: the archive must have ended with its end-of-archive block; every symlink is checked again. */
  end(): TarSummary {
    if (this.state !== 'done') {
      throw refuseArchive(
        this.state === 'header' && this.headerFill === 0
          ? `no end-of-archive block (after ${this.offset} bytes): cut short?`
          : `it ends in the middle of a member (after ${this.offset} bytes)`,
      );
    }
    if (this.count === 0) throw refuseArchive('no member');
    return this.members.end();
  }

  private onHeader(block: Buffer): void {
    const at = this.offset - BLOCK;
    if (block.every((b) => b === 0)) {
      if (this.next.kinds.size) throw refuseArchive(`metadata headers without their member before the end (byte ${at})`);
      this.state = 'done';
      return;
    }
    if (!checksumOk(block)) throw new WarrenError('invalid_argument', `not a tar archive (bad header checksum at byte ${at})`);
    // node-tar sniffs the first bytes and would decompress these into another archive.
    if (at === 0 && ((block[0] === 0x1f && block[1] === 0x8b) || block.subarray(0, 4).equals(ZSTD_MAGIC)))
      throw refuseArchive('it looks compressed (gzip or zstd); send a plain tar stream');
    const magic = block.subarray(257, 265).toString('latin1');
    const posix = magic === POSIX_MAGIC;
    if (!posix && magic !== GNU_MAGIC) throw refuseArchive(`a header that is neither POSIX ustar nor GNU at byte ${at}`);
    // tarfile joins these bytes as a prefix whatever the magic; GNU tar and node-tar do not.
    if (!posix && block.subarray(345, 500).some((b) => b !== 0)) throw refuseArchive(`a GNU header with data in its prefix field at byte ${at}`);
    for (const [start, length] of NUMBERS) number(block, start, length);
    number(block, MTIME[0], MTIME[1], false, true);
    const size = number(block, 124, 12);
    const type = String.fromCharCode(block[156] ?? 0);
    const rawName = field(block, 0, 100, 'name field');
    const rawLink = field(block, 157, 100, 'link name field');
    const prefix = posix ? field(block, 345, 155, 'prefix field') : new Uint8Array(0);
    if (META_TYPES.has(type)) {
      if (rawName.length === 0 || rawLink.length !== 0) throw refuseArchive(`a metadata header without a name or with a link name at byte ${at}`);
      this.startMeta(type, size, at);
      return;
    }
    // Fields a pax record or GNU long name replaced are not read (and may hold a name cut mid-character).
    const name = this.next.path ?? (prefix.length ? `${text(prefix, 'the prefix field')}/${text(rawName, 'the name field')}` : text(rawName, 'the name field'));
    const linkname = this.next.linkpath ?? text(rawLink, 'the link name field');
    const kind = TYPES[type];
    if (!kind) throw refuseMember(name, `unsupported member type ${JSON.stringify(type)} (only files, directories, symlinks and hard links)`);
    if (kind !== 'file' && size !== 0) throw refuseMember(name, `a ${MEMBER_WORDS[kind]} header with a size (${size})`);
    const member: TarMember = { name, type: kind, linkname, size: this.next.size ?? size };
    this.next = { kinds: new Set() };
    this.members.add(member);
    this.count++;
    this.onMember?.(member);
    this.remaining = kind === 'file' ? padded(member.size) : 0;
    this.state = this.remaining ? 'body' : 'header';
  }

  private startMeta(type: string, size: number, at: number): void {
    if (type === 'g' && this.next.kinds.size) throw refuseArchive(`a global header between a member's metadata and the member (byte ${at})`);
    if (type !== 'g' && this.next.kinds.has(type)) throw refuseArchive(`two ${JSON.stringify(type)} headers for one member (byte ${at})`);
    if (size > MAX_META_BYTES) throw refuseArchive(`a ${size}-byte metadata record`);
    if (type !== 'g') this.next.kinds.add(type);
    this.metaKind = type;
    this.metaSize = size;
    this.metaStart = this.offset;
    this.meta = [];
    this.remaining = padded(size);
    this.state = this.remaining ? 'meta' : 'header';
    if (!this.remaining) this.finishMeta();
  }

  private finishMeta(): void {
    const whole = Buffer.concat(this.meta);
    // GNU tar reads a long name up to a NUL in its whole last block, and tarfile reads pax
    // records out of the padding: bytes there would name another member for them than for node-tar.
    if (whole.subarray(this.metaSize).some((b) => b !== 0)) throw refuseArchive('bytes in the padding after a metadata record');
    const data = whole.subarray(0, this.metaSize);
    const kind = this.metaKind;
    if (kind === 'L' || kind === 'K') {
      const end = data.indexOf(0);
      if (end === 0 || data.length === 0 || (end > 0 && data.subarray(end).some((b) => b !== 0)))
        throw refuseArchive('a GNU long name that is empty or has bytes after its NUL');
      const name = text(end < 0 ? data : data.subarray(0, end), 'a GNU long name');
      this.setNext(kind === 'L' ? 'path' : 'linkpath', name);
      return;
    }
    const records = paxRecords(data);
    for (const key of records.keys()) {
      if (key.startsWith('GNU.sparse.')) throw refuseArchive('sparse members are not supported');
      // node-tar takes a pax type as the member's type; GNU tar and tarfile ignore it.
      if (key === 'type') throw refuseArchive('a pax type record');
    }
    if (kind === 'g') {
      // A global path, link or size would change every member after it: nobody needs that here.
      if (records.has('path') || records.has('linkpath') || records.has('size')) throw refuseArchive('a global header sets path, linkpath or size');
      return;
    }
    for (const key of ['path', 'linkpath'] as const) {
      const value = records.get(key);
      if (value === undefined) continue;
      if (value.includes(0)) throw refuseArchive(`a NUL in a pax ${key}`);
      this.setNext(key, text(value, `a pax ${key}`));
    }
    const size = records.get('size')?.toString('latin1');
    if (size !== undefined) {
      if (!/^[0-9]+$/.test(size) || !Number.isSafeInteger(Number(size))) throw refuseArchive(`a bad pax size ${JSON.stringify(size)}`);
      this.next.size = Number(size);
    }
  }

  private setNext(key: 'path' | 'linkpath', value: string): void {
    if (this.next[key] !== undefined) throw refuseArchive(`a member given its ${key} twice (a GNU long name and a pax ${key})`);
    this.next[key] = value;
  }
}

function padded(size: number): number {
  return Math.ceil(size / BLOCK) * BLOCK;
}
