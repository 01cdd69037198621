/** Newline-delimited JSON responses for live streams (exec output, process follow). */
import { KEEPALIVE_SECONDS, type ExecStreamEvent } from '@warren/protocol';

type DefaultEvent = ExecStreamEvent | { type: 'error'; code: string; message: string };

export interface EventSink<E = DefaultEvent> {
  send(event: E): void;
  close(): void;
}

/**
 * `produce` starts the work and returns a detach function called if the client goes away
 * (the work itself keeps going: a command's lifetime is not tied to the request).
 */
export function ndjsonResponse<E extends { type: string } = DefaultEvent>(produce: (sink: EventSink<E>) => () => void): Response {
  const encoder = new TextEncoder();
  let detach: (() => void) | undefined;
  let closed = false;
  let lastSent = Date.now();
  let keepalive: NodeJS.Timeout | undefined;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const sink: EventSink<E> = {
        send(event) {
          if (closed) return;
          lastSent = Date.now();
          controller.enqueue(encoder.encode(`${JSON.stringify(event)}\n`));
        },
        close() {
          if (closed) return;
          closed = true;
          clearInterval(keepalive);
          controller.close();
        },
      };
      keepalive = setInterval(() => {
        if (Date.now() - lastSent >= KEEPALIVE_SECONDS * 1000) sink.send({ type: 'keepalive' } as E);
      }, 1000);
      keepalive.unref();
      detach = produce(sink);
    },
    cancel() {
      closed = true;
      clearInterval(keepalive);
      detach?.();
    },
  });
  return new Response(body, { headers: { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' } });
}
