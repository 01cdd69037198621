/**
 * GET /v1/sandboxes/:id/files/watch?path=&recursive=1&user=: changes inside the sandbox as
 * NDJSON (WatchEvent): `ready` once the watch is in place, then changes, keepalives while
 * quiet, and an `error` line when the watch ends for a reason of its own. The client ends it
 * by closing the response.
 */
import { Hono } from 'hono';
import { KEEPALIVE_SECONDS, WarrenError, type WatchEvent } from '@warren/protocol';
import type { OpenWatch, WatchService } from '../../core/watch.js';
import type { AuthVars } from '../auth.js';

function flag(text: string | undefined, name: string): boolean {
  if (text === undefined || text === '' || text === '0' || text === 'false') return false;
  if (text === '1' || text === 'true') return true;
  throw new WarrenError('invalid_argument', `${name} must be 1/true or 0/false, got '${text.slice(0, 32)}'`);
}

export function watchRoutes(watches: WatchService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/:id/files/watch', async (c) => {
    const path = c.req.query('path');
    if (!path) throw new WarrenError('invalid_argument', 'query parameter "path" is required');
    const recursive = flag(c.req.query('recursive'), 'recursive');
    const watch = await watches.open(c.req.param('id'), path, { recursive, user: c.req.query('user') || undefined });
    return new Response(watchBody(watch), { headers: { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' } });
  });
  return app;
}

/**
 * One event per pull: nothing is read from the agent faster than the client reads, so a
 * slow client holds the agent back (which coalesces) instead of filling daemon memory.
 */
function watchBody(watch: OpenWatch): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const line = (e: WatchEvent) => encoder.encode(`${JSON.stringify(e)}\n`);
  const events = watch.events[Symbol.asyncIterator]();
  let next: Promise<IteratorResult<WatchEvent>> | undefined;
  let started = false;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (!started) {
          started = true;
          controller.enqueue(line({ type: 'ready', path: watch.path, isDir: watch.isDir }));
          return;
        }
        next ??= events.next();
        let timer: NodeJS.Timeout | undefined;
        const quiet = new Promise<'quiet'>((resolve) => {
          timer = setTimeout(() => resolve('quiet'), KEEPALIVE_SECONDS * 1000);
        });
        const got = await Promise.race([next, quiet]);
        clearTimeout(timer);
        if (got === 'quiet') {
          controller.enqueue(line({ type: 'keepalive' }));
          return;
        }
        next = undefined;
        if (got.done) {
          controller.close();
          return;
        }
        controller.enqueue(line(got.value));
        if (got.value.type === 'error') {
          watch.close();
          controller.close();
        }
      },
      cancel() {
        watch.close();
        void events.return?.(undefined);
      },
    },
    { highWaterMark: 1 },
  );
}
