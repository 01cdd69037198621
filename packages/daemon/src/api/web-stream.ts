/** Node streams as response bodies, without the copies that Readable.toWeb makes. */
import type { Readable } from 'node:stream';

/**
 * A web stream fed by `source`'s 'data' events, one chunk at a time. Readable.toWeb copies
 * each Buffer into a fresh Uint8Array (to detach it from Node's pool), and reading with
 * read() or the async iterator joins whatever is buffered into a new Buffer: for a file
 * download either was a fresh allocation and a copy per frame, which with the GC it caused
 * made up about a third of the daemon's CPU per byte. The chunks here are the guest channel's
 * own buffers, which nobody writes into again, so they are handed on as they are.
 * highWaterMark 1: the source is paused while a chunk waits for the HTTP socket, so a slow
 * client holds the agent back through the stream's credit window.
 */
export function webStreamOf(source: Readable): ReadableStream<Uint8Array> {
  let done = false;
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        source.pause();
        source.on('data', (chunk: Buffer) => {
          controller.enqueue(chunk);
          if ((controller.desiredSize ?? 0) <= 0) source.pause();
        });
        source.once('end', () => {
          if (!done) controller.close();
          done = true;
        });
        // A source that fails (the sandbox died, the file changed size) errors the web
        // stream, and the server then cuts the response short.
        source.once('error', (err) => {
          if (!done) controller.error(err);
          done = true;
        });
        source.once('close', () => {
          if (!done) controller.error(new Error('the stream closed before its end'));
          done = true;
        });
      },
      pull() {
        source.resume();
      },
      cancel() {
        // The client went away: destroying the source cancels the agent's stream.
        done = true;
        source.destroy();
      },
    },
    { highWaterMark: 1 },
  );
}
