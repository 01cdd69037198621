/**
 * What makes creates fast: /v1/templates/:name/pool (warm pools), /v1/templates/:name/bake
 * (baked images), and /metrics (Prometheus text format).
 */
import { Hono } from 'hono';
import { SetPoolRequest } from '@warren/protocol';
import type { WarmPool } from '../../core/pool.js';
import type { Baker } from '../../core/bake.js';
import type { TemplateAccess } from '../../templates/owners.js';
import { requireScope, type AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export function warmRoutes(pool: WarmPool, baker: Baker, templates: TemplateAccess): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/:name/bake', (c) => c.json(baker.info(templates.resolve(c.get('principal'), c.req.param('name')))));
  // Waits for the bake; a failed bake is a 200 with state 'failed' and the reason, since the
  // template itself stays usable (creates boot cold).
  app.post('/:name/bake', async (c) => {
    const name = c.req.param('name');
    templates.requireChange(c.get('principal'), name, 'bake');
    return c.json(await baker.bake(templates.resolve(c.get('principal'), name)));
  });
  app.get('/:name/pool', (c) => {
    templates.resolve(c.get('principal'), c.req.param('name'));
    return c.json(pool.info(c.req.param('name')));
  });
  app.put('/:name/pool', async (c) => {
    // Pool members hold host memory that no key's quota counts.
    requireScope(c.get('principal'), 'admin', 'sizing a warm pool');
    const { size } = parse(SetPoolRequest, await jsonBody(c));
    return c.json(pool.setSize(c.req.param('name'), size));
  });
  return app;
}

export function metricsText(pool: WarmPool, liveSandboxes: number): string {
  const lines: string[] = [];
  const metric = (name: string, type: string, help: string, rows: Array<[string, number]>) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of rows) lines.push(`${name}${labels} ${value}`);
  };
  const pools = pool.all();
  const by = (f: (p: (typeof pools)[number]) => number): Array<[string, number]> => pools.map((p) => [`{template="${p.template}"}`, f(p)]);
  metric('warren_sandboxes', 'gauge', 'Sandboxes that are not dead.', [['', liveSandboxes]]);
  metric(
    'warren_pool_size',
    'gauge',
    'Configured warm pool size.',
    by((p) => p.size),
  );
  metric(
    'warren_pool_ready',
    'gauge',
    'Pooled sandboxes ready to be claimed.',
    by((p) => p.ready),
  );
  metric(
    'warren_pool_hits_total',
    'counter',
    'Creates served from the warm pool.',
    by((p) => p.hits),
  );
  metric(
    'warren_pool_misses_total',
    'counter',
    'Creates that found the pool empty.',
    by((p) => p.misses),
  );
  metric(
    'warren_pool_reclaimed_total',
    'counter',
    'Pooled sandboxes destroyed because host memory ran low.',
    by((p) => p.reclaimed),
  );
  metric(
    'warren_pool_boot_failures_total',
    'counter',
    'Pool refills that failed.',
    by((p) => p.bootFailures),
  );
  const quantiles: Array<[string, number]> = [];
  for (const p of pools) {
    if (!p.claimMs) continue;
    for (const [q, v] of [
      ['0.5', p.claimMs.p50],
      ['0.95', p.claimMs.p95],
      ['0.99', p.claimMs.p99],
    ] as const) {
      quantiles.push([`{template="${p.template}",quantile="${q}"}`, v / 1000]);
    }
  }
  metric('warren_pool_claim_seconds', 'summary', 'Create latency of pool hits, request to ready.', quantiles);
  return `${lines.join('\n')}\n`;
}
