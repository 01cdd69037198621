/**
 * The events of one server-streaming RPC, as they happen: producers push, the RPC's async
 * generator reads. A keepalive every `keepaliveMs` while idle, as envd sends them (the SDK
 * asks with `Keepalive-Ping-Interval`), so proxies do not cut a quiet stream.
 */
export class EventQueue<T> {
  private items: T[] = [];
  private ended = false;
  private failure: unknown;
  private wake?: () => void;

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.wake?.();
  }

  end(failure?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = failure;
    this.wake?.();
  }

  /** Items until end(); throws end's failure; stops early when `signal` aborts. */
  async *drain(signal: AbortSignal, keepalive?: { everyMs: number; item: () => T }): AsyncGenerator<T> {
    const onAbort = () => this.end();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (true) {
        while (this.items.length) yield this.items.shift() as T;
        if (this.ended) break;
        let timer: NodeJS.Timeout | undefined;
        const idle = await new Promise<boolean>((resolve) => {
          this.wake = () => resolve(false);
          if (keepalive) timer = setTimeout(() => resolve(true), keepalive.everyMs);
        });
        clearTimeout(timer);
        this.wake = undefined;
        if (idle && keepalive) yield keepalive.item();
      }
      if (this.failure !== undefined && !signal.aborted) throw this.failure;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }
}

/** The keepalive interval a client asked for (`Keepalive-Ping-Interval`, seconds), bounded. */
export function keepaliveMs(headers: Headers): number {
  const asked = Number(headers.get('keepalive-ping-interval'));
  return Number.isFinite(asked) && asked >= 1 ? Math.min(asked, 300) * 1000 : 50_000;
}

/**
 * The envd streams open on each sandbox (process output, terminals, watches), so that a pause
 * can end them first: warren refuses to hibernate a sandbox with calls in progress, and E2B's
 * pause cuts them. The commands keep running and continue after the resume.
 */
export class OpenStreams {
  private readonly bySandbox = new Map<string, Set<() => void>>();

  /** Registers a stream's ending; returns its unregistering. */
  track(sandboxId: string, end: () => void): () => void {
    let set = this.bySandbox.get(sandboxId);
    if (!set) this.bySandbox.set(sandboxId, (set = new Set()));
    set.add(end);
    return () => {
      set.delete(end);
      if (!set.size) this.bySandbox.delete(sandboxId);
    };
  }

  /** Ends every stream open on the sandbox; returns how many there were. */
  endAll(sandboxId: string): number {
    const set = this.bySandbox.get(sandboxId);
    if (!set) return 0;
    this.bySandbox.delete(sandboxId);
    for (const end of set) end();
    return set.size;
  }
}
