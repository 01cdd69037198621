/** The HTTP API: auth, body limits, error mapping and the route modules, mounted under /v1. */
import { Hono } from 'hono';
import { requestId } from 'hono/request-id';
import type { Logger } from 'pino';
import { WarrenError, type HealthInfo, type RunscInfo } from '@warren/protocol';
import type { Registry } from '../core/registry.js';
import type { SandboxService } from '../core/sandboxes.js';
import type { ExecService } from '../core/exec.js';
import type { FileService } from '../core/files.js';
import { authorizeRequests, type Access, type AuthVars } from './auth.js';
import { keyRoutes } from './routes/keys.js';
import { auditRoutes } from './routes/audit.js';
import { auditTrail } from './audit-trail.js';
import type { ApiAudit } from '../keys/audit.js';
import { errorResponse } from './errors.js';
import { lingerOnUnreadBody } from './body.js';
import { requestBodyLimit } from './body-limit.js';
import { routeTable } from './facades.js';
import { routeTableRoutes } from './routes/route-table.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { snapshotRoutes } from './routes/snapshots.js';
import type { SnapshotService } from '../core/snapshots.js';
import type { EgressLog } from '../network/audit.js';
import { portForwarding, portRoutes, type PortDeps } from './routes/ports.js';
import { execRoutes } from './routes/exec.js';
import { fileRoutes } from './routes/files.js';
import { dirRoutes } from './routes/dirs.js';
import { watchRoutes } from './routes/watch.js';
import { WatchService } from '../core/watch.js';
import { templateRoutes } from './routes/templates.js';
import type { TemplateService } from '../templates/service.js';
import { metricsText, warmRoutes } from './routes/warm.js';
import type { WarmPool } from '../core/pool.js';
import type { Baker } from '../core/bake.js';
import type { UsageMeter } from '../core/usage.js';
import { usageRoutes } from './routes/usage.js';
import { logRoutes } from './routes/logs.js';
import { toolCallRoutes, toolSchemaRoutes } from './routes/tools.js';
import type { ToolService } from '../tools/service.js';
import type { LogFile } from '../storage/log-file.js';
import { mcpRoutes } from './routes/mcp.js';
import { terminalRoutes } from './routes/terminals.js';
import type { TerminalService } from '../core/terminals.js';
import { databaseRoutes } from './routes/databases.js';
import type { DatabaseService } from '../databases/service.js';
import type { WorkspaceDatabases } from '../databases/workspaces.js';
import { e2bControlRoutes } from '../e2b/control.js';
import { ENVD_PORT, envdApp } from '../e2b/envd/router.js';
import { SANDBOX_ID_HEADER } from '../e2b/envd/call.js';
import { OpenStreams } from '../e2b/envd/queue.js';
import { eventRoutes } from './routes/events.js';
import { uiLoginLinkRoutes, uiRoutes } from './routes/ui.js';
import type { LiveFeed } from '../core/live.js';
import { E2B_ENVD_PREFIX } from './facades.js';

export interface ApiDeps {
  registry: Registry;
  access: Access;
  audit: ApiAudit;
  sandboxes: SandboxService;
  exec: ExecService;
  files: FileService;
  templateService: TemplateService;
  pool: WarmPool;
  baker: Baker;
  meter: UsageMeter;
  snapshots: SnapshotService;
  egressLog: EgressLog;
  ports: PortDeps;
  log: Logger;
  logFile: LogFile;
  tools: ToolService;
  version: string;
  /** The runsc binary sandboxes run with, and why (drivers/gvisor/runsc-binary.ts). */
  runsc: RunscInfo;
  /** This daemon's API on loopback (known once it listens), and its certificate when it serves TLS: where `/mcp`'s tools send their calls. */
  self: () => { url: string; ca?: string };
  terminals: TerminalService;
  databases: DatabaseService;
  workspaceDatabases: WorkspaceDatabases;
  live: LiveFeed;
}

export function buildApp(deps: ApiDeps): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  // Every response names its request (X-Request-Id); a 5xx body carries it too, and the
  // daemon's log files the failure's details under it.
  app.use('*', requestId({ limitLength: 64 }));
  app.onError((err, c) => errorResponse(c, err, deps.log));
  app.notFound((c) => errorResponse(c, new WarrenError('not_found', `no route for ${c.req.method} ${c.req.path}`), deps.log));

  app.use('*', lingerOnUnreadBody);
  // E2B's envd for every sandbox (docs/e2b.md), authorized by the sandbox's access token:
  // under /e2b/envd, and on the host names of port 49983, which would otherwise be port URLs.
  const watches = new WatchService(deps.sandboxes);
  const envdStreams = new OpenStreams();
  const envd = envdApp({
    access: deps.access,
    sandboxes: deps.sandboxes,
    exec: deps.exec,
    files: deps.files,
    terminals: deps.terminals,
    watches,
    streams: envdStreams,
    log: deps.log,
  });
  app.use(`${E2B_ENVD_PREFIX}/*`, async (c) => envd.fetch(c.req.raw, c.env));
  app.use('*', async (c, next) => {
    const target = deps.ports.hosts.parse(c.req.header('host'));
    if (target?.port !== ENVD_PORT) return next();
    const headers = new Headers(c.req.raw.headers);
    headers.set(SANDBOX_ID_HEADER, target.sandboxId);
    const url = new URL(c.req.url);
    url.pathname = `${E2B_ENVD_PREFIX}${url.pathname}`;
    return envd.fetch(new Request(url, { method: c.req.method, headers, body: c.req.raw.body, duplex: 'half' } as RequestInit), c.env);
  });
  // Port URLs are served on their own host names, before the API's key check.
  app.use('*', portForwarding(deps.ports));
  // The dashboard's pages and its login, which sets the session cookie the key check accepts.
  app.route('/', uiRoutes(deps.access));
  // Every route past this point: a valid key, the route's scope, and only the key's own
  // resources (E2B's control plane checks its key at its own entry, e2b/entry.ts).
  const authorize = authorizeRequests(deps.access);
  // Outside the key check, so that refused calls are in the trail too.
  app.use('/v1/*', auditTrail(deps.audit, deps.log));
  app.use('/mcp/*', auditTrail(deps.audit, deps.log));
  app.use('/e2b/*', auditTrail(deps.audit, deps.log));
  app.use('/v1/*', authorize);
  app.use('/metrics', authorize);
  app.use('/mcp/*', authorize);
  // After the key check, before any handler reads a body (body-limit.ts).
  app.use('/v1/*', requestBodyLimit);
  app.use('/mcp/*', requestBodyLimit);

  app.get('/v1/health', (c) => c.json({ ok: true, version: deps.version, sandboxes: deps.registry.countLive(), runsc: deps.runsc } satisfies HealthInfo));
  app.route('/v1/templates', templateRoutes(deps.templateService, deps.access.templates, deps.log));
  app.get('/metrics', (c) => c.text(metricsText(deps.pool, deps.registry.countLive()), 200, { 'content-type': 'text/plain; version=0.0.4' }));
  app.route('/v1/templates', warmRoutes(deps.pool, deps.baker, deps.access.templates));
  app.route('/v1/sandboxes', sandboxRoutes(deps.sandboxes, deps.snapshots, deps.egressLog, deps.workspaceDatabases, deps.access));
  app.route('/v1/snapshots', snapshotRoutes(deps.snapshots));
  app.route('/v1/sandboxes', portRoutes(deps.ports));
  app.route('/v1/usage', usageRoutes(deps.meter));
  app.route('/v1/logs', logRoutes(deps.logFile));
  app.route('/v1/tools', toolSchemaRoutes());
  app.route('/v1/sandboxes', toolCallRoutes(deps.tools, deps.sandboxes));
  app.route('/v1/sandboxes', execRoutes(deps.exec));
  app.route('/v1/sandboxes', fileRoutes(deps.files, deps.sandboxes));
  app.route('/v1/sandboxes', dirRoutes(deps.files, deps.sandboxes));
  app.route('/v1/sandboxes', watchRoutes(watches));
  app.route('/mcp', mcpRoutes(deps.self));
  app.route('/v1/sandboxes', terminalRoutes(deps.terminals));
  app.route(
    '/v1/databases',
    databaseRoutes(deps.databases, deps.access, () => deps.sandboxes.resourcesFor(undefined)),
  );
  app.route('/v1/keys', keyRoutes(deps.access.keys));
  app.route('/v1/events', eventRoutes({ feed: deps.live, sandboxes: deps.sandboxes, exec: deps.exec, egress: deps.egressLog, access: deps.access }));
  app.route('/v1/ui', uiLoginLinkRoutes(deps.access));
  app.route('/v1/audit', auditRoutes(deps.audit));
  // The app's own routes and envd's, read when asked: whatever was registered, as it is.
  app.route(
    '/v1/routes',
    routeTableRoutes(() => routeTable(app, envd)),
  );
  // E2B's control plane, as calls of this same app with the caller's key.
  app.route(
    '/e2b',
    e2bControlRoutes({
      api: app,
      access: deps.access,
      domain: () => `${deps.ports.hosts.domain}:${deps.ports.daemonPort()}`,
      defaults: () => deps.sandboxes.resourcesFor(undefined),
      endStreams: (id) => envdStreams.endAll(id),
      log: deps.log,
    }),
  );
  return app;
}
