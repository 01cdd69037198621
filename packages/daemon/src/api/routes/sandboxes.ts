/** /v1/sandboxes: create, list, get, kill, ttl, hibernate, resume, fork, snapshot. */
import { Hono } from 'hono';
import { CreateSandboxRequest, CreateSnapshotRequest, ForkRequest, SandboxStates, SetTtlRequest, WarrenError, type SandboxState } from '@warren/protocol';
import type { SandboxService } from '../../core/sandboxes.js';
import type { SnapshotService } from '../../core/snapshots.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export function sandboxRoutes(sandboxes: SandboxService, snapshots: SnapshotService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.post('/', async (c) => {
    const req = parse(CreateSandboxRequest, await jsonBody(c));
    return c.json(await sandboxes.create(req, c.get('apiKeyId')), 201);
  });

  app.get('/', (c) => {
    const state = c.req.query('state');
    if (state !== undefined && !SandboxStates.includes(state as SandboxState)) {
      throw new WarrenError('invalid_argument', `state must be one of ${SandboxStates.join(', ')}`);
    }
    const limitText = c.req.query('limit');
    const limit = limitText === undefined ? 100 : Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new WarrenError('invalid_argument', 'limit must be an integer from 1 to 1000');
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(c.req.query())) {
      if (k.startsWith('metadata.')) metadata[k.slice('metadata.'.length)] = v;
    }
    return c.json(sandboxes.list({ state: state as SandboxState | undefined, metadata, limit, cursor: c.req.query('cursor') }));
  });

  app.get('/:id', async (c) => c.json(await sandboxes.getWithDisk(c.req.param('id'))));

  app.post('/:id/hibernate', async (c) => c.json(await sandboxes.hibernate(c.req.param('id'))));

  app.post('/:id/resume', async (c) => c.json(await sandboxes.resume(c.req.param('id'))));

  app.post('/:id/fork', async (c) => {
    const req = parse(ForkRequest, await jsonBody(c));
    return c.json(await sandboxes.fork(c.req.param('id'), req), 201);
  });

  app.post('/:id/snapshots', async (c) => {
    const req = parse(CreateSnapshotRequest, await jsonBody(c));
    return c.json(await snapshots.create(c.req.param('id'), req.metadata, c.get('apiKeyId')), 201);
  });

  app.delete('/:id', async (c) => {
    await sandboxes.kill(c.req.param('id'));
    return c.body(null, 204);
  });

  app.post('/:id/ttl', async (c) => {
    const { ttlSeconds } = parse(SetTtlRequest, await jsonBody(c));
    return c.json(sandboxes.setTtl(c.req.param('id'), ttlSeconds));
  });

  return app;
}
