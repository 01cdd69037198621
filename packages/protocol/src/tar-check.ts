/**
 * A streaming check of tar archives, run on every directory transfer before any byte of a
 * member reaches the program that extracts it: inside the sandbox in front of GNU tar
 * (uploads), and on the host in front of node-tar (downloads, where the archive comes from
 * the sandbox and is hostile). The same rules on both sides (docs/files.md, "Directories"):
 *
 * - names are relative and stay inside: no absolute name, no `..` component;
 * - nothing is written through a symlink of the archive (a member under one, or replacing one);
 * - a symlink's target, resolved through the archive's other symlinks, stays inside: no
 *   absolute target, no way up past the root (checked again at the end, against every
 *   symlink, since a later one can change what an earlier target means);
 * - a hard link names a regular file earlier in the archive (a link to a symlink would copy
 *   its relative target to another place);
 * - only files, directories and links: no devices, FIFOs, sparse or multi-volume members;
 * - after the end-of-archive block, only zeros.
 *
 * It parses ustar, pax (path, linkpath, size) and GNU long names; it never writes anything.
 * Errors name the member, JSON-quoted so that control characters in a name arrive escaped.
 */
import { WarrenError } from './errors.js';

const BLOCK = 512;
/** Largest pax or GNU long-name record kept whole (names are at most 4096 bytes on Linux). */
const MAX_META_BYTES = 1024 * 1024;
/** Symlink hops while resolving a target, as the kernel's limit (ELOOP). */
const MAX_HOPS = 40;

export interface TarSummary {
  files: number;
  directories: number;
  symlinks: number;
  hardlinks: number;
  /** Bytes of file contents. */
  bytes: number;
  /** The archive has an entry for its root (`.` or `./`): its mode and time apply to the destination. */
  hasRoot: boolean;
}

type State = 'header' | 'body' | 'meta' | 'done';

/** Refusal of one member, naming it. */
function refuse(name: string, why: string): WarrenError {
  return new WarrenError('invalid_argument', `refused tar member ${JSON.stringify(name)}: ${why}`, { details: { member: name } });
}

function cstring(block: Uint8Array, start: number, length: number): string {
  let end = start;
  while (end < start + length && block[end] !== 0) end++;
  return Buffer.from(block.buffer, block.byteOffset + start, end - start).toString('utf8');
}

/** Octal ASCII, or GNU base-256 (first byte's high bit set) for large values. */
function number(block: Uint8Array, start: number, length: number): number {
  if ((block[start] ?? 0) & 0x80) {
    let value = (block[start] ?? 0) & 0x7f;
    for (let i = start + 1; i < start + length; i++) value = value * 256 + (block[i] ?? 0);
    return value;
  }
  const text = cstring(block, start, length).trim();
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw new WarrenError('invalid_argument', `not a tar archive: bad number field ${JSON.stringify(text)}`);
  return parseInt(text, 8);
}

function checksumOk(block: Uint8Array): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (block[i] ?? 0);
  return sum === number(block, 148, 8);
}

/** Components of a member name, without '' and '.'; refuses absolute names and `..`. */
export function memberComponents(name: string): string[] {
  if (name.startsWith('/')) throw refuse(name, 'absolute names are not allowed');
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw refuse(name, "'..' components are not allowed");
  return parts;
}

/** Parses pax records ("LEN key=value\n"). */
function paxRecords(data: Buffer, where: string): Map<string, string> {
  const out = new Map<string, string>();
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    const len = space < 0 ? NaN : Number(data.subarray(at, space).toString('latin1'));
    if (!Number.isInteger(len) || len <= space - at || at + len > data.length) {
      if (data.subarray(at).every((b) => b === 0)) break;
      throw new WarrenError('invalid_argument', `not a tar archive: bad pax record in ${where}`);
    }
    const record = data.subarray(space + 1, at + len - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (eq > 0) out.set(record.slice(0, eq), record.slice(eq + 1));
    at += len;
  }
  return out;
}

/**
 * Where a symlink's target leads, resolved through the archive's symlinks: undefined when it
 * stays inside the root, else why not. Dangling targets inside are fine.
 */
export function symlinkEscape(linkPath: string, target: string, links: ReadonlyMap<string, string>): string | undefined {
  if (target === '') return 'empty symlink target';
  if (target.startsWith('/')) return `points to the absolute path ${JSON.stringify(target)}`;
  const stack = linkPath.split('/').slice(0, -1);
  const queue = target.split('/');
  let hops = 0;
  while (queue.length) {
    const c = queue.shift() as string;
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (!stack.length) return `its target ${JSON.stringify(target)} leads outside the destination`;
      stack.pop();
      continue;
    }
    stack.push(c);
    const next = links.get(stack.join('/'));
    if (next === undefined) continue;
    if (++hops > MAX_HOPS) return `its target ${JSON.stringify(target)} loops through symlinks`;
    stack.pop();
    if (next.startsWith('/')) return `its target ${JSON.stringify(target)} leads outside the destination`;
    queue.unshift(...next.split('/'));
  }
  return undefined;
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
  private offset = 0;
  /** From pax 'x' or GNU 'L'/'K' records, for the next member only. */
  private next: { path?: string; linkpath?: string; size?: number } = {};
  private links = new Map<string, string>();
  private files = new Set<string>();
  private summary: TarSummary = { files: 0, directories: 0, symlinks: 0, hardlinks: 0, bytes: 0, hasRoot: false };

  /** Checks the next bytes of the archive; throws on the first refused member or bad block. */
  push(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.state === 'done') {
        for (let i = at; i < chunk.length; i++) {
          if (chunk[i] !== 0)
            throw new WarrenError('invalid_argument', `refused tar archive: data after its end-of-archive block (byte ${this.offset + i - at})`);
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

  /** After the last byte: the archive must not stop inside a member; every symlink is checked again. */
  end(): TarSummary {
    if (this.state === 'body' || this.state === 'meta' || this.headerFill !== 0) {
      throw new WarrenError('invalid_argument', `refused tar archive: it ends in the middle of a member (after ${this.offset} bytes)`);
    }
    for (const [path, target] of this.links) {
      const why = symlinkEscape(path, target, this.links);
      if (why) throw refuse(path, `symlink: ${why}`);
    }
    return this.summary;
  }

  private onHeader(block: Buffer): void {
    if (block.every((b) => b === 0)) {
      this.state = 'done';
      return;
    }
    if (!checksumOk(block)) throw new WarrenError('invalid_argument', `not a tar archive (bad header checksum at byte ${this.offset - BLOCK})`);
    const type = String.fromCharCode(block[156] ?? 0);
    const ustar = cstring(block, 257, 6) === 'ustar';
    const prefix = ustar && block[263] === 0x30 ? cstring(block, 345, 155) : '';
    const rawName = cstring(block, 0, 100);
    const name = this.next.path ?? (prefix ? `${prefix}/${rawName}` : rawName);
    const size = this.next.size ?? number(block, 124, 12);
    const linkname = this.next.linkpath ?? cstring(block, 157, 100);
    if (type === 'x' || type === 'g' || type === 'L' || type === 'K') {
      if (size > MAX_META_BYTES) throw new WarrenError('invalid_argument', `refused tar archive: a ${size}-byte metadata record`);
      this.metaKind = type;
      this.metaSize = size;
      this.meta = [];
      this.remaining = padded(size);
      this.state = this.remaining ? 'meta' : 'header';
      if (!this.remaining) this.finishMeta();
      return;
    }
    this.next = {};
    this.member(type, name, linkname, size);
    this.remaining = padded(size);
    this.state = this.remaining ? 'body' : 'header';
  }

  private finishMeta(): void {
    const data = Buffer.concat(this.meta).subarray(0, this.metaSize);
    const kind = this.metaKind;
    if (kind === 'L' || kind === 'K') {
      const end = data.indexOf(0);
      const text = data.subarray(0, end < 0 ? data.length : end).toString('utf8');
      if (kind === 'L') this.next.path = text;
      else this.next.linkpath = text;
      return;
    }
    const records = paxRecords(data, kind === 'g' ? 'a global header' : 'an extended header');
    for (const key of records.keys()) {
      if (key.startsWith('GNU.sparse.')) throw new WarrenError('invalid_argument', 'refused tar archive: sparse members are not supported');
    }
    if (kind === 'g') {
      // A global path would rename every member after it: nobody needs that here.
      if (records.has('path') || records.has('linkpath'))
        throw new WarrenError('invalid_argument', 'refused tar archive: a global header sets path or linkpath');
      return;
    }
    const path = records.get('path');
    const linkpath = records.get('linkpath');
    const size = records.get('size');
    if (path !== undefined) this.next.path = path;
    if (linkpath !== undefined) this.next.linkpath = linkpath;
    if (size !== undefined) {
      if (!/^\d+$/.test(size)) throw new WarrenError('invalid_argument', `not a tar archive: bad pax size ${JSON.stringify(size)}`);
      this.next.size = Number(size);
    }
  }

  private member(type: string, name: string, linkname: string, size: number): void {
    if (name === '') throw new WarrenError('invalid_argument', `refused tar archive: a member without a name at byte ${this.offset - BLOCK}`);
    const parts = memberComponents(name);
    const path = parts.join('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (this.links.has(dir)) throw refuse(name, `it would be written through the symlink ${JSON.stringify(dir)}`);
    }
    if (path !== '' && this.links.has(path)) throw refuse(name, `it would replace the symlink ${JSON.stringify(path)} of the same archive`);
    if (path === '' && type !== '5') throw refuse(name, 'only a directory can stand for the destination itself');
    switch (type) {
      case '0':
      case '\0':
      case '7':
        this.files.add(path);
        this.summary.files++;
        this.summary.bytes += size;
        return;
      case '5':
        this.files.delete(path);
        if (path === '') this.summary.hasRoot = true;
        else this.summary.directories++;
        return;
      case '2': {
        this.files.delete(path);
        const why = symlinkEscape(path, linkname, this.links);
        if (why) throw refuse(name, `symlink: ${why}`);
        this.links.set(path, linkname);
        this.summary.symlinks++;
        return;
      }
      case '1': {
        let target: string;
        try {
          target = memberComponents(linkname).join('/');
        } catch {
          throw refuse(name, `hard link to ${JSON.stringify(linkname)}, outside the destination`);
        }
        if (!this.files.has(target)) throw refuse(name, `hard link to ${JSON.stringify(linkname)}, which is not a regular file earlier in the archive`);
        this.files.add(path);
        this.summary.hardlinks++;
        return;
      }
      default:
        throw refuse(name, `unsupported member type ${JSON.stringify(type)} (only files, directories, symlinks and hard links)`);
    }
  }
}

function padded(size: number): number {
  return Math.ceil(size / BLOCK) * BLOCK;
}
