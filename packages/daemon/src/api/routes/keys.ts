/** /v1/keys: API keys, for admin keys only (docs/security.md, "API keys and scopes"). */
import { Hono } from 'hono';
import { CreateKeyRequest, type ApiKeyList } from '@warren/protocol';
import type { KeyService } from '../../keys/service.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export function keyRoutes(keys: KeyService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.post('/', async (c) => c.json(keys.create(parse(CreateKeyRequest, await jsonBody(c))), 201));
  app.get('/', (c) => c.json({ keys: keys.list() } satisfies ApiKeyList));
  app.get('/:id', (c) => c.json(keys.get(c.req.param('id'))));
  app.post('/:id/rotate', (c) => c.json(keys.rotate(c.req.param('id'))));
  app.delete('/:id', (c) => c.json(keys.revoke(c.req.param('id'))));
  return app;
}
