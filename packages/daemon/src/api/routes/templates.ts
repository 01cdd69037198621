/**
 * /v1/templates: list, get, build (NDJSON progress stream), remove, prune the build cache.
 * A key that is not an admin key sees shared templates and its own, and changes only its own
 * (templates/owners.ts).
 */
import { Hono } from 'hono';
import {
  BuildTemplateRequest,
  DEBIAN_BASE,
  PruneLayersRequest,
  type PruneLayersResult,
  type TemplateBuildEvent,
  type TemplateBuildLogList,
  type TemplateList,
  type TemplateVersionList,
} from '@warren/protocol';
import { publicTemplateInfo } from '../../templates/catalog.js';
import type { TemplateAccess } from '../../templates/owners.js';
import type { BuildPlan } from '../../templates/plan.js';
import type { TemplateService } from '../../templates/service.js';
import { requireEgressGrant, requireScope, type AuthVars } from '../auth.js';
import { jsonBody, parse, toWarrenError } from '../errors.js';
import { ndjsonResponse } from '../ndjson.js';
import type { Logger } from 'pino';

export function templateRoutes(templates: TemplateService, access: TemplateAccess, log: Logger): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.get('/', (c) => c.json({ templates: access.list(c.get('principal')).map(publicTemplateInfo) } satisfies TemplateList));

  app.get('/:name', (c) => c.json(publicTemplateInfo(access.resolve(c.get('principal'), c.req.param('name')))));

  app.get('/:name/versions', (c) => {
    const name = access.resolve(c.get('principal'), c.req.param('name')).name;
    return c.json({ versions: templates.versions(name) } satisfies TemplateVersionList);
  });

  app.get('/:name/builds', (c) => {
    // Logs outlive a failed first build, which leaves no template to resolve: the name's owner may read them.
    const name = access.requireReadLogs(c.get('principal'), c.req.param('name'));
    return c.json({ builds: templates.buildLogs.list(name) } satisfies TemplateBuildLogList);
  });

  app.get('/:name/builds/:id', async (c) => {
    const name = access.requireReadLogs(c.get('principal'), c.req.param('name'));
    const { text } = await templates.buildLogs.read(name, c.req.param('id'));
    return c.text(text, 200, { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff' });
  });

  app.delete('/:name', async (c) => {
    const name = c.req.param('name');
    access.requireChange(c.get('principal'), name, 'remove');
    await templates.remove(name);
    access.owners.release(name);
    return c.body(null, 204);
  });

  app.post('/prune', async (c) => {
    // The build cache is every key's.
    requireScope(c.get('principal'), 'admin', 'pruning the template build cache');
    const req = parse(PruneLayersRequest, await jsonBody(c));
    return c.json((await templates.pruneLayers(req)) satisfies PruneLayersResult);
  });

  // Bad input fails before the stream starts (a plain 400); what fails while building is
  // the stream's last event. The build is cancelled if the client goes away.
  app.post('/build', async (c) => {
    const req = parse(BuildTemplateRequest, await jsonBody(c));
    const p = c.get('principal');
    // A build context is a directory of the daemon's host: copy steps put its files in the
    // template. Clients send one by default; without copy steps it is never read.
    if (req.steps.some((s) => s.type === 'copy')) requireScope(p, 'admin', 'a build with copy steps (files from the daemon host)');
    // A template's network default is every one of its sandboxes' egress policy.
    if (req.network?.allow.length) {
      requireScope(p, 'network:write', 'a template with network.allow');
      requireEgressGrant(p, req.network.allow);
    }
    if (req.from !== DEBIAN_BASE) access.requireBase(p, req.from);
    const { claimed } = access.claimForBuild(p, req.name);
    const tenant = p.admin ? undefined : { keyId: p.keyId, fromOwn: req.from !== DEBIAN_BASE && access.owners.ownerOf(req.from) === p.keyId };
    let plan: BuildPlan;
    try {
      plan = await templates.plan(req, tenant);
    } catch (err) {
      if (claimed) access.owners.release(req.name);
      throw err;
    }
    const unclaim = () => {
      if (claimed && !templates.catalog.find(req.name)) access.owners.release(req.name);
    };
    return ndjsonResponse<TemplateBuildEvent>((sink) => {
      const abort = new AbortController();
      const started = Date.now();
      templates
        .build(plan, (e) => sink.send(e), abort.signal)
        .then((info) => sink.send({ type: 'done', template: publicTemplateInfo(info), elapsedMs: Date.now() - started }))
        .catch((err: unknown) => {
          const e = toWarrenError(err);
          if (e.code === 'internal') log.error({ err: err instanceof Error ? err.stack : String(err), template: plan.name }, 'template build failed');
          const d = (e.details ?? {}) as { step?: number; exitCode?: number | null; output?: string };
          sink.send({ type: 'error', code: e.code, message: e.message, step: d.step, exitCode: d.exitCode, output: d.output });
        })
        .finally(() => {
          unclaim();
          sink.close();
        });
      return () => abort.abort();
    });
  });

  return app;
}
