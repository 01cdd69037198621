/**
 * /v1/sandboxes/:id/files/dir (a directory as a tar stream, both ways) and /files/batch
 * (several files in one call). The checks of the archive happen in the agent (guest dirs.ts)
 * and in the clients that extract downloads; docs/api.md and docs/files.md.
 */
import { Hono } from 'hono';
import { DIR_EXISTS_POLICIES, WarrenError, WriteManyRequest, type DirExistsPolicy, type WriteManyResult } from '@warren/protocol';
import type { FileService } from '../../core/files.js';
import type { SandboxService } from '../../core/sandboxes.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';
import { bodyChunks } from '../body.js';
import { webStreamOf } from '../web-stream.js';
import { limited, pathQuery, userQuery } from './files.js';

function existsQuery(text: string | undefined): DirExistsPolicy | undefined {
  if (text === undefined || text === '') return undefined;
  if (!(DIR_EXISTS_POLICIES as readonly string[]).includes(text)) {
    throw new WarrenError('invalid_argument', `exists must be one of ${DIR_EXISTS_POLICIES.join(', ')} (got '${text.slice(0, 32)}')`);
  }
  return text as DirExistsPolicy;
}

async function* once(data: Buffer): AsyncIterable<Uint8Array> {
  yield data;
}

/** As PUT /files, but a missing parent directory is made first (mkdir -p), as the caller would expect of a batch. */
async function writeCreatingParent(
  files: FileService,
  id: string,
  path: string,
  data: Buffer,
  user?: string,
  mode?: number,
): Promise<{ size: number; path: string }> {
  try {
    return await files.write(id, path, once(data), user, mode);
  } catch (err) {
    const parent = path.replace(/\/[^/]*$/, '');
    if (!(err instanceof WarrenError && err.code === 'not_found') || parent === path || parent === '') throw err;
    await files.mkdir(id, parent, user);
    return files.write(id, path, once(data), user, mode);
  }
}

export function dirRoutes(files: FileService, sandboxes: SandboxService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.get('/:id/files/dir', async (c) => {
    const body = await files.readDir(c.req.param('id'), pathQuery(c), userQuery(c));
    return new Response(webStreamOf(body), { headers: { 'content-type': 'application/x-tar' } });
  });

  app.put('/:id/files/dir', async (c) => {
    const id = c.req.param('id');
    const exists = existsQuery(c.req.query('exists'));
    // The archive's size bounds what it can add to the disk (headers and padding count too).
    const maxBytes = await sandboxes.diskHeadroom(id);
    const declared = Number(c.req.header('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared > maxBytes) {
      throw new WarrenError('too_large', `upload of ${declared} bytes exceeds the ${maxBytes} bytes left of the sandbox's disk limit`);
    }
    return c.json(await files.writeDir(id, pathQuery(c), limited(bodyChunks(c), maxBytes), userQuery(c), exists));
  });

  app.post('/:id/files/batch', async (c) => {
    const id = c.req.param('id');
    const req = parse(WriteManyRequest, await jsonBody(c));
    const user = userQuery(c);
    const datas = req.files.map((f) => Buffer.from(f.data, 'base64'));
    const total = datas.reduce((n, d) => n + d.length, 0);
    const maxBytes = await sandboxes.diskHeadroom(id);
    if (total > maxBytes) throw new WarrenError('too_large', `batch of ${total} bytes exceeds the ${maxBytes} bytes left of the sandbox's disk limit`);
    const out: WriteManyResult = { files: [] };
    // One after another, each file atomic on its own (as PUT /files): a failure names its path
    // and leaves the files before it written.
    for (const [i, f] of req.files.entries()) {
      const data = datas[i] as Buffer;
      try {
        out.files.push(await writeCreatingParent(files, id, f.path, data, user, f.mode));
      } catch (err) {
        if (err instanceof WarrenError) {
          throw new WarrenError(err.code, `${err.message} (file ${i + 1} of ${req.files.length}, ${f.path}; the ${i} before it were written)`, {
            details: { index: i, written: i },
          });
        }
        throw err;
      }
    }
    return c.json(out);
  });

  return app;
}
