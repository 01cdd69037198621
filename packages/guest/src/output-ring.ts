/**
 * The recent output of a terminal, replayed to a client that attaches: the last `capacity`
 * bytes, addressed by their offset in everything the terminal wrote since it opened.
 */
export class OutputRing {
  private buf: Buffer;
  /** Bytes written in all; the ring holds [total - kept, total). */
  total = 0;
  private kept = 0;

  constructor(readonly capacity: number) {
    this.buf = Buffer.alloc(capacity);
  }

  push(chunk: Buffer): void {
    // Only the tail of a chunk larger than the ring can survive anyway.
    const data = chunk.length > this.capacity ? chunk.subarray(chunk.length - this.capacity) : chunk;
    // Where the kept part's first byte goes: its offset is total + what was cut off.
    const at = (this.total + chunk.length - data.length) % this.capacity;
    const first = Math.min(data.length, this.capacity - at);
    data.copy(this.buf, at, 0, first);
    if (first < data.length) data.copy(this.buf, 0, first);
    this.total += chunk.length;
    this.kept = Math.min(this.capacity, this.kept + chunk.length);
  }

  /**
   * What is kept from `offset` on, and the offset it really starts at: later than asked when
   * the bytes asked for have been overwritten, `total` (nothing) when the offset is past it.
   */
  since(offset: number): { offset: number; data: Buffer } {
    const start = Math.min(this.total, Math.max(offset, this.total - this.kept));
    const length = this.total - start;
    const out = Buffer.allocUnsafe(length);
    const at = start % this.capacity;
    const first = Math.min(length, this.capacity - at);
    this.buf.copy(out, 0, at, at + first);
    if (first < length) this.buf.copy(out, first, 0, length - first);
    return { offset: start, data: out };
  }
}
