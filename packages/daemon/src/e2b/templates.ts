/**
 * E2B's template API, as far as warren's recipes express it (docs/e2b.md): the SDK's
 * `Template.build` asks for a build (POST /v3/templates), sends what to build
 * (POST /v2/templates/:id/builds/:build) and polls its status with logs. A build is a
 * warren template build (POST /v1/templates/build) with the caller's key; the template's
 * name is the E2B template id, so `Sandbox.create(name)` then uses it.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import type { Logger } from 'pino';
import {
  DEBIAN_BASE,
  TEMPLATE_NAME_PATTERN,
  WarrenError,
  ndjson,
  parse,
  type BuildTemplateRequest,
  type RecipeStep,
  type ResolvedResources,
  type TemplateBuildEvent,
} from '@warren/protocol';
import { E2bTemplateBuild, E2bTemplateRequest, type E2bBuildInfo, type E2bLogEntry, type E2bTemplate } from '@warren/protocol/e2b';
import { jsonBody } from '../api/errors.js';
import { ENVD_VERSION } from './envd/router.js';
import { caller, e2bApiKey, rawCall, type WarrenApi } from './warren-calls.js';

/** E2B's images that stand for a warren starting point. */
const IMAGES: Record<string, string> = {
  'e2bdev/base': 'base',
  'e2bdev/base:latest': 'base',
  'debian:bookworm': DEBIAN_BASE,
  'debian:12': DEBIAN_BASE,
};
/** Finished builds are kept this long for their status and logs. */
const KEEP_FINISHED_MS = 3600_000;

interface Build {
  info: E2bBuildInfo;
  /** Whose build it is: only the same key reads it. */
  keyHash: string;
  /** Given at POST /v3/templates; the build starts at POST /v2/templates/:id/builds/:build. */
  started: boolean;
  finishedAt?: number;
}

const keyHashOf = (c: Context) => createHash('sha256').update(e2bApiKey(c)).digest('hex');

/** The SDK's build as a warren recipe; what warren cannot express is a 400 naming it. */
export function recipeOf(name: string, b: E2bTemplateBuild): BuildTemplateRequest {
  let from: string;
  if (b.fromTemplate) from = b.fromTemplate;
  else if (b.fromImage && IMAGES[b.fromImage]) from = IMAGES[b.fromImage]!;
  else {
    throw new WarrenError(
      'invalid_argument',
      `fromImage ${JSON.stringify(b.fromImage ?? '')}: warren builds from ${Object.keys(IMAGES).join(', ')} or an installed template (fromTemplate); it does not pull container images`,
    );
  }
  if (b.fromImageRegistry) throw new WarrenError('invalid_argument', 'image registries are not supported: warren does not pull container images');
  const steps = b.steps.map((s, i): RecipeStep => {
    const at = `step ${i + 1} (${s.type})`;
    const arg = (n: number) => {
      const v = s.args[n];
      if (v === undefined) throw new WarrenError('invalid_argument', `${at} needs ${n + 1} argument(s)`);
      return v;
    };
    switch (s.type) {
      case 'RUN':
        return { type: 'run', cmd: arg(0), ...(s.args[1] ? { user: s.args[1] } : {}) };
      case 'ENV': {
        const env: Record<string, string> = {};
        for (let k = 0; k + 1 < s.args.length; k += 2) env[s.args[k]!] = s.args[k + 1]!;
        return { type: 'env', env };
      }
      case 'WORKDIR':
        return { type: 'workdir', path: arg(0) };
      case 'USER':
        return { type: 'user', user: arg(0) };
      default:
        // COPY: its files would come through an upload link, which warren does not offer.
        throw new WarrenError(
          'invalid_argument',
          `${at}: copying files into an E2B template build is not supported; build with \`warren template build\` and a recipe's copy steps`,
        );
    }
  });
  return {
    name,
    from,
    steps,
    ...(b.startCmd ? { start: { cmd: b.startCmd } } : {}),
    ...(b.readyCmd ? { ready: { cmd: b.readyCmd } } : {}),
  };
}

/** What one warren build event adds to the E2B log. */
function logOf(e: TemplateBuildEvent): E2bLogEntry | undefined {
  const timestamp = new Date().toISOString();
  switch (e.type) {
    case 'step':
      return { timestamp, level: 'info', message: `[${e.step}/${e.total}] ${e.description}${e.cached ? ' (cached)' : ''}` };
    case 'log':
      return { timestamp, level: e.stream === 'stderr' ? 'warn' : 'info', message: e.line };
    case 'done':
      return { timestamp, level: 'info', message: `built ${e.template.name} version ${e.template.version} in ${(e.elapsedMs / 1000).toFixed(1)}s` };
    case 'error':
      return { timestamp, level: 'error', message: e.message };
    default:
      return undefined;
  }
}

export function e2bTemplateRoutes(api: WarrenApi, log: Logger, defaults: () => ResolvedResources): Hono {
  const app = new Hono();
  const builds = new Map<string, Build>();

  const buildOf = (c: Context): Build => {
    const b = builds.get(c.req.param('buildID') ?? '');
    if (!b || b.info.templateID !== c.req.param('templateID') || b.keyHash !== keyHashOf(c)) {
      throw new WarrenError('not_found', `no build ${c.req.param('buildID')} of template ${c.req.param('templateID')}`);
    }
    return b;
  };

  const forget = () => {
    const now = Date.now();
    for (const [id, b] of builds) if (b.finishedAt !== undefined && now - b.finishedAt > KEEP_FINISHED_MS) builds.delete(id);
  };

  /** Runs the warren build in the background, its events kept as the E2B build's logs. */
  const run = async (b: Build, res: Response) => {
    const finish = (status: 'ready' | 'error', reason?: E2bBuildInfo['reason']) => {
      b.info.status = status;
      if (reason) b.info.reason = reason;
      b.finishedAt = Date.now();
    };
    try {
      for await (const e of ndjson<TemplateBuildEvent>(res)) {
        const entry = logOf(e);
        if (entry) b.info.logEntries.push(entry);
        if (e.type === 'done') finish('ready');
        if (e.type === 'error') finish('error', { message: e.message, ...(e.step !== undefined ? { step: e.step === 1 ? 'base' : String(e.step - 1) } : {}) });
      }
      if (b.info.status === 'building') finish('error', { message: 'the build ended without a result' });
    } catch (err) {
      log.warn({ template: b.info.templateID, build: b.info.buildID, err: String(err) }, 'e2b template build stream failed');
      finish('error', { message: `the build failed: ${(err as Error).message}` });
    }
  };

  app.get('/templates', async (c) => {
    const { templates } = await caller(c, api)<{ templates: Array<{ name: string; version: string; builtAt?: string }> }>('GET', '/v1/templates');
    const size = defaults();
    return c.json(
      templates.map(
        (t): E2bTemplate => ({
          templateID: t.name,
          buildID: t.version,
          cpuCount: size.cpus,
          memoryMB: size.memoryMB,
          diskSizeMB: size.diskMB,
          public: false,
          aliases: [t.name],
          names: [t.name],
          createdAt: t.builtAt ?? new Date(0).toISOString(),
          updatedAt: t.builtAt ?? new Date(0).toISOString(),
          lastSpawnedAt: null,
          spawnCount: 0,
          buildCount: 1,
          envdVersion: ENVD_VERSION,
          buildStatus: 'ready',
        }),
      ),
    );
  });

  app.get('/templates/aliases/:alias', async (c) => {
    const t = await caller(c, api)<{ name: string }>('GET', `/v1/templates/${encodeURIComponent(c.req.param('alias'))}`);
    return c.json({ templateID: t.name, public: false });
  });

  app.post('/v3/templates', async (c) => {
    const req = parse(E2bTemplateRequest, await jsonBody(c));
    const name = (req.name ?? req.alias ?? '').split(':')[0] ?? '';
    if (!TEMPLATE_NAME_PATTERN.test(name) || name.length > 63) {
      throw new WarrenError(
        'invalid_argument',
        `template name ${JSON.stringify(name)} must be lowercase letters, digits and -, starting with a letter or digit`,
      );
    }
    forget();
    const buildID = randomUUID();
    builds.set(buildID, { info: { templateID: name, buildID, status: 'waiting', logEntries: [], logs: [] }, keyHash: keyHashOf(c), started: false });
    return c.json({ templateID: name, buildID, names: [name], tags: [], public: false }, 202);
  });

  app.get('/templates/:templateID/files/:hash', () => {
    throw new WarrenError(
      'invalid_argument',
      "copying files into an E2B template build is not supported; build with `warren template build` and a recipe's copy steps",
    );
  });

  app.post('/v2/templates/:templateID/builds/:buildID', async (c) => {
    const b = buildOf(c);
    if (b.started) throw new WarrenError('conflict', `build ${b.info.buildID} has already started`);
    const recipe = recipeOf(b.info.templateID, parse(E2bTemplateBuild, await jsonBody(c)));
    // Refusals (scope, a bad recipe, a name taken by another key) come back now, before the stream.
    const res = await rawCall(c, api)('POST', '/v1/templates/build', recipe);
    b.started = true;
    b.info.status = 'building';
    void run(b, res);
    return c.json({}, 202);
  });

  app.get('/templates/:templateID/builds/:buildID/status', (c) => {
    const b = buildOf(c);
    const offset = Math.max(0, Number(c.req.query('logsOffset') ?? 0) || 0);
    const logEntries = b.info.logEntries.slice(offset);
    return c.json({ ...b.info, logEntries, logs: logEntries.map((e) => e.message) } satisfies E2bBuildInfo);
  });

  app.delete('/templates/:templateID', async (c) => {
    await caller(c, api)('DELETE', `/v1/templates/${encodeURIComponent(c.req.param('templateID'))}`);
    return c.body(null, 204);
  });

  return app;
}
