/**
 * E2B's envd, served by the daemon for every sandbox (docs/e2b.md): mounted at /e2b/envd
 * (the SDK's E2B_SANDBOX_URL, the sandbox named by `E2b-Sandbox-Id`) and on the host names
 * `49983-<sandbox>.<port domain>`. Each call carries the sandbox's access token
 * (`X-Access-Token`, a warren sandbox token made at create or connect): it reaches that
 * sandbox only, with the token's scopes.
 */
import { createConnectRouter } from '@connectrpc/connect';
import { createFetchHandler } from '@connectrpc/connect/protocol';
import { Hono, type Context } from 'hono';
import type { Logger } from 'pino';
import { CREDENTIAL_HEADER, SANDBOX_TOKEN_SCOPE_OF, WarrenError, type Scope } from '@warren/protocol';
import { Filesystem, Process } from '@warren/protocol/e2b';
import { authorizeSandboxCall, requestAddress, type Access } from '../../api/auth.js';
import { requestBodyLimit } from '../../api/body-limit.js';
import { E2B_ENVD_PREFIX, answersPublicly } from '../../api/facades.js';
import type { ExecService } from '../../core/exec.js';
import type { FileService } from '../../core/files.js';
import type { SandboxService } from '../../core/sandboxes.js';
import type { TerminalService } from '../../core/terminals.js';
import type { WatchService } from '../../core/watch.js';
import { e2bErrorBody } from '../errors.js';
import { SANDBOX_ID_HEADER } from './call.js';
import { envdFileRoutes } from './files.js';
import { filesystemService } from './filesystem.js';
import { processService } from './process.js';
import type { OpenStreams } from './queue.js';

/** The port E2B's SDKs address envd on (`<port>-<id>` host names). */
export const ENVD_PORT = 49983;
/** The version of envd whose API this serves (the SDK turns features on by it). */
export const ENVD_VERSION = '0.5.7';

export interface EnvdDeps {
  access: Access;
  sandboxes: SandboxService;
  exec: ExecService;
  files: FileService;
  terminals: TerminalService;
  watches: WatchService;
  /** The envd streams open per sandbox: a pause ends them first. */
  streams: OpenStreams;
  log: Logger;
}

/** Filesystem calls that only look. */
const READS = new Set(['Stat', 'ListDir', 'WatchDir', 'CreateWatcher', 'GetWatcherEvents', 'RemoveWatcher']);

/** The scope a call needs: commands are exec, looking at files read, changing them files. */
function scopeOf(method: string, rest: string): Scope {
  if (rest.startsWith('/process.Process/')) return SANDBOX_TOKEN_SCOPE_OF.exec;
  if (rest.startsWith('/filesystem.Filesystem/'))
    return READS.has(rest.slice('/filesystem.Filesystem/'.length)) ? SANDBOX_TOKEN_SCOPE_OF.read : SANDBOX_TOKEN_SCOPE_OF.files;
  return method === 'GET' ? SANDBOX_TOKEN_SCOPE_OF.read : SANDBOX_TOKEN_SCOPE_OF.files;
}

/** The envd app, its routes under E2B_ENVD_PREFIX (its paths are envd's below it). */
export function envdApp(deps: EnvdDeps): Hono {
  const prefix = E2B_ENVD_PREFIX;
  const log = deps.log.child({ component: 'e2b-envd' });
  const router = createConnectRouter();
  router.service(Process, processService({ exec: deps.exec, terminals: deps.terminals, streams: deps.streams, log }));
  router.service(Filesystem, filesystemService({ files: deps.files, watches: deps.watches, streams: deps.streams, log }));
  const rpc = new Map(router.handlers.map((h) => [h.requestPath, createFetchHandler(h, { httpVersion: '1.1' })]));

  const authorize = (c: Context, rest: string) => {
    // The credential first: a call without one learns nothing, not even what else it lacks.
    const token = c.req.header(CREDENTIAL_HEADER.envdAccessToken);
    if (!token) throw new WarrenError('unauthenticated', `missing X-Access-Token: the sandbox's envdAccessToken from create or connect`);
    const sandboxId = c.req.header(SANDBOX_ID_HEADER);
    if (!sandboxId) throw new WarrenError('invalid_argument', 'missing E2b-Sandbox-Id header: which sandbox is this call for?');
    authorizeSandboxCall(deps.access, token, requestAddress(c), sandboxId, scopeOf(c.req.method, rest), `envd ${rest}`);
    return sandboxId;
  };

  const app = new Hono();
  app.onError((err, c) => {
    const { status, body } = e2bErrorBody(err, log, `${c.req.method} ${c.req.path}`);
    return c.json(body, status as 400);
  });

  // The entry: the sandbox's token on every route but the public ones (api/facades.ts), then
  // the body's size, before any handler runs or reads a body (the host-name form comes here too).
  app.use(`${prefix}/*`, async (c, next) => {
    if (!answersPublicly(c)) authorize(c, c.req.path.slice(prefix.length));
    await next();
  });
  app.use(`${prefix}/*`, requestBodyLimit);

  // isRunning() reads a 502 as "not running"; nothing tells another key's sandbox from a gone one.
  app.get(`${prefix}/health`, (c) => {
    try {
      const id = authorize(c, '/health');
      return deps.sandboxes.get(id).state === 'running' ? c.body(null, 204) : c.body(null, 502);
    } catch (err) {
      if (err instanceof WarrenError && (err.code === 'unauthenticated' || err.code === 'not_found')) return c.body(null, 502);
      throw err;
    }
  });

  // Each RPC a route of its own, so that the route table (GET /v1/routes) lists it.
  for (const [path, handler] of rpc) app.post(`${prefix}${path}`, (c) => handler(c.req.raw));
  app.route(prefix, envdFileRoutes(deps.files, deps.sandboxes));
  return app;
}
