/**
 * Flow control of Data streams, the same on both ends of the guest channel: a sender has at
 * most STREAM_WINDOW_BYTES on the way that the reader has not yet granted back with a
 * 'credit' message, so a slow reader bounds the memory of both sides (docs/guest-protocol.md).
 */
import { STREAM_WINDOW_BYTES } from './guest.js';

/** The sender's side of one stream. */
export class SendWindow {
  private inflight = 0;
  private waiters: Array<() => void> = [];

  /**
   * Waits until `length` more bytes fit in the window, then counts them as sent. A chunk
   * always goes when nothing is in flight, whatever its size. Returns false, counting
   * nothing, as soon as `open()` is false (the stream or the channel went away).
   */
  async reserve(length: number, open: () => boolean): Promise<boolean> {
    while (open() && this.inflight > 0 && this.inflight + length > STREAM_WINDOW_BYTES) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
    if (!open()) return false;
    this.inflight += length;
    return true;
  }

  /** The reader consumed `bytes`. */
  grant(bytes: number): void {
    this.inflight = Math.max(0, this.inflight - bytes);
    this.wake();
  }

  /** Lets waiting senders look at open() again (after an abort or a close). */
  wake(): void {
    const waiting = this.waiters;
    this.waiters = [];
    for (const resume of waiting) resume();
  }
}

/**
 * The reader's side of one stream: owes the sender credit for the bytes it has consumed and
 * pays it in half-window steps. Every message into a sandbox's pipe costs far more than its
 * few bytes (a grant per Data frame made credit the bulk of a download's CPU); the sender
 * stalls only with the whole window unacknowledged, which is two steps.
 */
export class ReceiveCredit {
  static readonly STEP = STREAM_WINDOW_BYTES / 2;
  private owed = 0;

  constructor(private readonly send: (bytes: number) => void) {}

  /** `bytes` more were consumed (or handed on); nothing is paid yet. */
  owe(bytes: number): void {
    this.owed += bytes;
  }

  /** Pays what is owed, if at least `atLeast`. */
  pay(atLeast = ReceiveCredit.STEP): void {
    if (this.owed > 0 && this.owed >= atLeast) {
      this.send(this.owed);
      this.owed = 0;
    }
  }

  /** owe() then pay(): for readers that consume a chunk at once. */
  consumed(bytes: number): void {
    this.owe(bytes);
    this.pay();
  }
}
