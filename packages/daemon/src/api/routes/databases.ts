/** /v1/databases: create, list, get, delete, branch, url (docs/databases.md). */
import { Hono, type Context } from 'hono';
import { BranchDatabaseRequest, CreateDatabaseRequest, DatabaseName, RestoreDatabaseRequest, type DatabaseList, type DatabaseUrl } from '@warren/protocol';
import type { DatabaseService } from '../../databases/service.js';
import { holding, type SandboxSize } from '../../keys/quotas.js';
import { requireAccess, type Access, type AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

/**
 * `size` is what a database's sandbox takes (the default resources): creates and restores
 * count against the key's quotas as sandbox creates, branches as forks.
 */
export function databaseRoutes(databases: DatabaseService, access: Access, size: () => SandboxSize): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  const { owners, quotas } = access;
  const admitted = <T>(c: Context<AuthVars>, kind: 'create' | 'fork', make: () => Promise<T>): Promise<T> =>
    holding(quotas.admit(c.get('principal'), kind, 1, size()), make);
  // A bad name in the path is a 400 naming the rule, not a 404.
  const name = (raw: string) => parse(DatabaseName, raw);

  app.post('/', async (c) => {
    const req = parse(CreateDatabaseRequest, await jsonBody(c));
    if (req.fromSnapshot) requireAccess(c.get('principal'), owners, 'snapshot', req.fromSnapshot);
    const opts = { ...(req.fromSnapshot ? { fromSnapshot: req.fromSnapshot } : {}), ...(req.retainSeconds ? { retainSeconds: req.retainSeconds } : {}) };
    return c.json(await admitted(c, 'create', () => databases.create(req.name, opts, c.get('apiKeyId'))), 201);
  });

  app.get('/', (c) => {
    const p = c.get('principal');
    return c.json({ databases: databases.list(p.admin ? undefined : p.keyId) } satisfies DatabaseList);
  });

  app.get('/:name', (c) => c.json(databases.get(name(c.req.param('name')))));

  app.get('/:name/url', (c) => c.json({ url: databases.url(name(c.req.param('name'))) } satisfies DatabaseUrl));

  app.post('/:name/branches', async (c) => {
    const req = parse(BranchDatabaseRequest, await jsonBody(c));
    return c.json(await admitted(c, 'fork', () => databases.branch(name(c.req.param('name')), req.name)), 201);
  });

  app.post('/:name/restore', async (c) => {
    const req = parse(RestoreDatabaseRequest, await jsonBody(c));
    const to = typeof req.to === 'number' ? req.to : Date.parse(req.to);
    return c.json(await admitted(c, 'create', () => databases.restore(name(c.req.param('name')), req.name, to, c.get('apiKeyId'))), 201);
  });

  app.delete('/:name', async (c) => {
    await databases.remove(name(c.req.param('name')));
    return c.body(null, 204);
  });

  return app;
}
