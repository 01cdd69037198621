/**
 * envd's REST routes: GET /files (download), POST /files (upload: multipart with one part per
 * file, or a raw octet-stream body, gzip allowed), GET /health. Relative paths start at the
 * user's home (`username` query parameter, else the call's user); missing parent directories
 * are made, as the user, like envd does.
 */
import path from 'node:path/posix';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { Hono, type Context } from 'hono';
import { WarrenError } from '@warren/protocol';
import type { FileService } from '../../core/files.js';
import type { SandboxService } from '../../core/sandboxes.js';
import { bodyChunks } from '../../api/body.js';
import { limited } from '../../api/routes/files.js';
import { webStreamOf } from '../../api/web-stream.js';
import { callOf, checkedUser, resolvePath, userHome, type EnvdCall } from './call.js';

/** The call, with `username` (the query parameter the SDK sends) in place of the header's user. */
function callWithUser(c: Context): EnvdCall {
  const call = callOf(c.req.raw.headers);
  const username = c.req.query('username');
  if (!username) return call;
  const user = checkedUser(username);
  return { ...call, user, home: userHome(user) };
}

function requiredPath(c: Context): string {
  const p = c.req.query('path');
  if (!p) throw new WarrenError('invalid_argument', 'query parameter "path" is required');
  return p;
}

async function* fromBlob(blob: Blob): AsyncIterable<Uint8Array> {
  yield new Uint8Array(await blob.arrayBuffer());
}

export function envdFileRoutes(files: FileService, sandboxes: SandboxService): Hono {
  const app = new Hono();

  app.get('/files', async (c) => {
    const call = callWithUser(c);
    const { size, body } = await files.read(call.sandboxId, resolvePath(call, requiredPath(c)), call.user);
    return new Response(webStreamOf(body), { headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) } });
  });

  app.post('/files', async (c) => {
    const call = callWithUser(c);
    const headroom = await sandboxes.diskHeadroom(call.sandboxId);
    const declared = Number(c.req.header('content-length') ?? Number.NaN);
    if (Number.isFinite(declared) && declared > headroom) {
      throw new WarrenError('too_large', `upload of ${declared} bytes exceeds the ${headroom} bytes left of the sandbox's disk limit`);
    }
    const write = async (target: string, source: AsyncIterable<Uint8Array>) => {
      await files.mkdir(call.sandboxId, path.dirname(target), call.user);
      const written = await files.write(call.sandboxId, target, limited(source, headroom), call.user);
      return { name: path.basename(written.path), type: 'file', path: written.path };
    };
    const type = c.req.header('content-type') ?? '';
    if (type.startsWith('multipart/form-data')) {
      const form = await c.req.formData();
      const parts = form.getAll('file').filter((v): v is File => typeof v !== 'string');
      if (!parts.length) throw new WarrenError('invalid_argument', 'the form has no "file" part');
      const out = [];
      // One part per file; a part's file name is its path when the query names none.
      for (const part of parts) out.push(await write(resolvePath(call, c.req.query('path') || part.name), fromBlob(part)));
      return c.json(out);
    }
    const target = resolvePath(call, requiredPath(c));
    const raw = bodyChunks(c);
    const gzip = (c.req.header('content-encoding') ?? '').toLowerCase() === 'gzip';
    const source = gzip ? (Readable.from(raw).pipe(createGunzip()) as AsyncIterable<Uint8Array>) : raw;
    return c.json([await write(target, source)]);
  });

  return app;
}
