/**
 * The agent tool set: `GET /v1/tools` (definitions to hand a model) and
 * `POST /v1/sandboxes/:id/tools/:name` (run one call).
 */
import { Hono } from 'hono';
import { TOOL_FORMATS, ToolCallRequest, WarrenError, toolSchemas, type ToolFormat } from '@warren/protocol';
import type { SandboxService } from '../../core/sandboxes.js';
import type { ToolService } from '../../tools/service.js';
import type { AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export function toolSchemaRoutes(): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.get('/', (c) => {
    const format = c.req.query('format') ?? 'anthropic';
    if (!(TOOL_FORMATS as readonly string[]).includes(format)) {
      throw new WarrenError('invalid_argument', `format must be one of ${TOOL_FORMATS.join(', ')} (got ${JSON.stringify(format.slice(0, 50))})`);
    }
    return c.json({ tools: toolSchemas(format as ToolFormat) });
  });
  return app;
}

export function toolCallRoutes(tools: ToolService, sandboxes: SandboxService): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  app.post('/:id/tools/:name', async (c) => {
    const id = c.req.param('id');
    sandboxes.get(id); // 404 for unknown sandboxes, before a file's not_found could be confused with it
    const req = parse(ToolCallRequest, await jsonBody(c));
    return c.json(await tools.call(id, c.req.param('name'), req));
  });
  return app;
}
