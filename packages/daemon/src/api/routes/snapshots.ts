/** /v1/snapshots: list, get, delete (taken with POST /v1/sandboxes/:id/snapshots). */
import { Hono } from 'hono';
import type { SnapshotService } from '../../core/snapshots.js';
import type { AuthVars } from '../auth.js';

export function snapshotRoutes(snapshots: SnapshotService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => {
    const p = c.get('principal');
    return c.json({ snapshots: snapshots.list(p.admin ? undefined : p.keyId) });
  });
  app.get('/:id', (c) => c.json(snapshots.get(c.req.param('id'))));
  app.delete('/:id', async (c) => {
    await snapshots.delete(c.req.param('id'));
    return c.body(null, 204);
  });
  return app;
}
