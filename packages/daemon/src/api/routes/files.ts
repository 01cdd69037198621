/** /v1/sandboxes/:id/files: streamed read and write, plus list/stat/exists/mkdir/move/remove. */
import { Hono, type Context } from 'hono';
import { MkdirRequest, MoveRequest, WarrenError } from '@warren/protocol';
import type { FileService } from '../../core/files.js';
import type { SandboxService } from '../../core/sandboxes.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';
import { bodyChunks } from '../body.js';
import { webStreamOf } from '../web-stream.js';

export function pathQuery(c: Context): string {
  const p = c.req.query('path');
  if (!p) throw new WarrenError('invalid_argument', 'query parameter "path" is required');
  return p;
}

export function userQuery(c: Context): string | undefined {
  return c.req.query('user') || undefined;
}

/** Counts bytes as they pass and fails the upload once it exceeds the sandbox's disk size. */
export async function* limited(body: AsyncIterable<Uint8Array>, maxBytes: number): AsyncIterable<Uint8Array> {
  let total = 0;
  for await (const chunk of body) {
    total += chunk.byteLength;
    if (total > maxBytes) throw new WarrenError('too_large', `upload exceeds the ${maxBytes} bytes left of the sandbox's disk limit`);
    yield chunk;
  }
}

export function fileRoutes(files: FileService, sandboxes: SandboxService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.get('/:id/files', async (c) => {
    const { size, body } = await files.read(c.req.param('id'), pathQuery(c), userQuery(c));
    const headers = { 'content-type': 'application/octet-stream', 'content-length': String(size) };
    if (c.req.method === 'HEAD') {
      // Nobody will read the body of a HEAD response: stop the agent's stream now, or it
      // would sit in daemon memory (a window's worth per request) until the sandbox dies.
      body.destroy();
      return new Response(null, { headers });
    }
    return new Response(webStreamOf(body), { headers });
  });

  app.put('/:id/files', async (c) => {
    const id = c.req.param('id');
    // What the sandbox already holds counts: an upload that would push it over diskMB is
    // refused here rather than accepted and then stopping the sandbox at the next heartbeat.
    const maxBytes = await sandboxes.diskHeadroom(id);
    const declared = Number(c.req.header('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared > maxBytes) {
      throw new WarrenError('too_large', `upload of ${declared} bytes exceeds the ${maxBytes} bytes left of the sandbox's disk limit`);
    }
    const modeText = c.req.query('mode');
    // Whole octal digits only: parseInt alone reads '644abc' as 644 and '9' as nothing.
    const mode = modeText === undefined ? undefined : /^[0-7]{1,5}$/.test(modeText) ? parseInt(modeText, 8) : Number.NaN;
    if (mode !== undefined && (!Number.isInteger(mode) || mode < 0 || mode > 0o7777)) {
      throw new WarrenError('invalid_argument', `mode must be octal from 0 to 7777, for example 644 or 0755 (got '${modeText?.slice(0, 32)}')`);
    }
    return c.json(await files.write(id, pathQuery(c), limited(bodyChunks(c), maxBytes), userQuery(c), mode));
  });

  app.delete('/:id/files', async (c) => c.json({ removed: await files.remove(c.req.param('id'), pathQuery(c), userQuery(c)) }));

  app.get('/:id/files/stat', async (c) => c.json(await files.stat(c.req.param('id'), pathQuery(c), userQuery(c))));

  app.get('/:id/files/exists', async (c) => {
    const id = c.req.param('id');
    sandboxes.record(id, 'files'); // a missing sandbox is a 404, not "file does not exist"
    try {
      await files.stat(id, pathQuery(c), userQuery(c));
      return c.json({ exists: true });
    } catch (err) {
      if (err instanceof WarrenError && err.code === 'not_found') return c.json({ exists: false });
      throw err;
    }
  });

  app.get('/:id/files/list', async (c) => {
    const depthText = c.req.query('depth');
    const depth = depthText === undefined ? 1 : Number(depthText);
    if (!Number.isInteger(depth) || depth < 1 || depth > 32) throw new WarrenError('invalid_argument', 'depth must be an integer from 1 to 32');
    return c.json({ entries: await files.list(c.req.param('id'), pathQuery(c), depth, userQuery(c)) });
  });

  app.post('/:id/files/mkdir', async (c) => {
    const { path } = parse(MkdirRequest, await jsonBody(c));
    return c.json(await files.mkdir(c.req.param('id'), path, userQuery(c)), 201);
  });

  app.post('/:id/files/move', async (c) => {
    const { from, to } = parse(MoveRequest, await jsonBody(c));
    return c.json(await files.move(c.req.param('id'), from, to, userQuery(c)));
  });

  return app;
}
