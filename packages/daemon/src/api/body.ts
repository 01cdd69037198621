/**
 * Request bodies at the Node level. Handlers may stop reading a body early (a refused or
 * over-limit upload); what is left must still be taken off the wire, or the client cannot
 * finish sending, read the error response and reuse its connection.
 */
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';

/** The Node request behind a context; absent when the app runs outside the Node server. */
export function incomingOf(c: Context): IncomingMessage | undefined {
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
    if (incoming && !incoming.readableEnded && !incoming.destroyed) incoming.resume();
  }
};
