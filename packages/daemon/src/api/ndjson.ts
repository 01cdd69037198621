/** Newline-delimited JSON responses for live streams (exec output, process follow). */
import type { ExecStreamEvent } from '@warren/protocol';

export interface EventSink {
  send(event: ExecStreamEvent | { type: 'error'; code: string; message: string }): void;
  close(): void;
}

/**
 * `produce` starts the work and returns a detach function called if the client goes away
 * (the work itself keeps going: a command's lifetime is not tied to the request).
 */
export function ndjsonResponse(produce: (sink: EventSink) => () => void): Response {
  const encoder = new TextEncoder();
  let detach: (() => void) | undefined;
  let closed = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      const sink: EventSink = {
        send(event) {
          if (!closed) controller.enqueue(encoder.encode(JSON.stringify(event) + '\n'));
        },
        close() {
          if (closed) return;
          closed = true;
          controller.close();
        },
      };
      detach = produce(sink);
    },
    cancel() {
      closed = true;
      detach?.();
    },
  });
  return new Response(body, { headers: { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' } });
}
