/**
 * The last N bytes of a stream, and how many characters went by in all: what the agent tools'
 * `bash` keeps of a command's output, inside the sandbox, so that a 50 MB log costs a pipe
 * read here and a few kilobytes on the wire.
 */
import { isAscii } from 'node:buffer';

export class OutputTail {
  private chunks: Buffer[] = [];
  private held = 0;
  /** Characters seen in all (UTF-8 sequences: every byte that does not continue one). */
  chars = 0;

  constructor(private readonly maxBytes: number) {}

  push(chunk: Buffer): void {
    this.chars += countChars(chunk);
    this.chunks.push(chunk);
    this.held += chunk.length;
    // Compacted only when twice the limit is held: each byte is copied a bounded number of times.
    if (this.held >= 2 * this.maxBytes) this.compact();
  }

  /** The kept bytes, starting at a character boundary. */
  bytes(): Buffer {
    this.compact();
    const buf = this.chunks[0] ?? Buffer.alloc(0);
    let start = 0;
    while (start < buf.length && start < 4 && (buf.readUInt8(start) & 0xc0) === 0x80) start++;
    return buf.subarray(start);
  }

  private compact(): void {
    const all = Buffer.concat(this.chunks, this.held);
    const kept = all.length > this.maxBytes ? all.subarray(all.length - this.maxBytes) : all;
    this.chunks = [kept];
    this.held = kept.length;
  }
}

export function countChars(chunk: Buffer): number {
  if (isAscii(chunk)) return chunk.length;
  let n = 0;
  for (const b of chunk) if ((b & 0xc0) !== 0x80) n++;
  return n;
}
