/**
 * Request bodies at the Node level. Handlers may stop reading a body early (a refused or
 * over-limit upload); what is left must still be taken off the wire, or the client cannot
 * finish sending, read the error response and reuse its connection.
 */
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';

/** The Node request behind a context; absent when the app runs outside the Node server. */
function incomingOf(c: Context): IncomingMessage | undefined {
  return (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
}

/**
 * The request body as chunks straight from the socket. Unlike the web stream of `c.req.raw`,
 * stopping early does not destroy the request (which would reset the connection before the
 * error response is out); lingerOnUnreadBody discards the rest.
 */
export function bodyChunks(c: Context): AsyncIterable<Uint8Array> {
  const incoming = incomingOf(c);
  if (incoming) return { [Symbol.asyncIterator]: () => incoming.iterator({ destroyOnReturn: false }) };
  return (c.req.raw.body ?? new ReadableStream<Uint8Array>({ start: (ctl) => ctl.close() })) as unknown as AsyncIterable<Uint8Array>;
}

/**
 * After the handler, discards whatever of the body it left unread, without buffering it. The
 * client that is still sending (a refused upload) then gets the response intact and its
 * connection stays usable; a client that stops sending ends the request itself.
 */
export const lingerOnUnreadBody: MiddlewareHandler = async (c, next) => {
  try {
    await next();
  } finally {
    const incoming = incomingOf(c);
    const hasBody = incoming !== undefined && (incoming.headers['transfer-encoding'] !== undefined || Number(incoming.headers['content-length'] ?? 0) > 0);
    if (incoming && hasBody && !incoming.readableEnded && !incoming.destroyed) {
      // Once anything has looked at c.req.raw.body (the body-limit middleware does), the
      // request is adapted into a web stream that pauses it whenever its queue is full, so
      // it has to be drained through that stream; resuming the request would not hold.
      let web: ReadableStream<Uint8Array> | null = null;
      try {
        web = c.req.raw.body;
      } catch {
        // no body to adapt
      }
      if (web && !web.locked) void discard(web);
      else {
        // Someone still holds a reader it will not use again (the body-limit middleware
        // when it gives up): detach the abandoned consumers so the request can flow.
        incoming.removeAllListeners('data');
        incoming.removeAllListeners('readable');
        incoming.resume();
      }
    }
  }
};

async function discard(body: ReadableStream<Uint8Array>): Promise<void> {
  const reader = body.getReader();
  try {
    while (!(await reader.read()).done) {
      // dropped
    }
  } catch {
    // the client went away; nothing left to drain
  }
}
