/** /v1/templates: list, get, build (NDJSON progress stream), remove, prune the build cache. */
import { Hono } from 'hono';
import { BuildTemplateRequest, PruneLayersRequest, type PruneLayersResult, type TemplateBuildEvent, type TemplateList } from '@warren/protocol';
import { publicTemplateInfo } from '../../templates/catalog.js';
import type { TemplateService } from '../../templates/service.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse, toWarrenError } from '../errors.js';
import { ndjsonResponse } from '../ndjson.js';
import type { Logger } from 'pino';

export function templateRoutes(templates: TemplateService, log: Logger): Hono<AuthVars> {
  const app = new Hono<AuthVars>();

  app.get('/', (c) => c.json({ templates: templates.list().map(publicTemplateInfo) } satisfies TemplateList));

  app.get('/:name', (c) => c.json(publicTemplateInfo(templates.get(c.req.param('name')))));

  app.delete('/:name', async (c) => {
    await templates.remove(c.req.param('name'));
    return c.body(null, 204);
  });

  app.post('/prune', async (c) => {
    const req = parse(PruneLayersRequest, await jsonBody(c));
    return c.json((await templates.pruneLayers(req)) satisfies PruneLayersResult);
  });

  // Bad input fails before the stream starts (a plain 400); what fails while building is
  // the stream's last event. The build is cancelled if the client goes away.
  app.post('/build', async (c) => {
    const req = parse(BuildTemplateRequest, await jsonBody(c));
    const plan = await templates.plan(req);
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
        .finally(() => sink.close());
      return () => abort.abort();
    });
  });

  return app;
}
