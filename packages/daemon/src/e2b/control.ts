/**
 * E2B's control plane (spec/openapi.yml in e2b-dev/E2B) under /e2b, as a translation: each
 * call becomes calls of warren's own /v1 API with the caller's key (warren-calls.ts); this
 * module only maps shapes and semantics (docs/e2b.md).
 */
import { Hono, type Context } from 'hono';
import type { z } from 'zod';
import type { Logger } from 'pino';
import {
  E2B_ALL_TRAFFIC,
  E2bConnectRequest,
  E2bNetwork,
  E2bForkRequest,
  E2bNewSandbox,
  E2bRefreshRequest,
  E2bResumeRequest,
  E2bTimeoutRequest,
  type E2bSandbox,
  type E2bSandboxDetail,
  type E2bSandboxMetric,
  type E2bState,
} from '@warren/protocol/e2b';
import {
  WarrenError,
  parse,
  type CreateSandboxRequest,
  type ForkResult,
  type NewSandboxToken,
  type ResolvedResources,
  type SandboxInfo,
  type SandboxList,
} from '@warren/protocol';
import type { Access, AuthVars } from '../api/auth.js';
import { requestBodyLimit } from '../api/body-limit.js';
import { jsonBody } from '../api/errors.js';
import { e2bEntry } from './entry.js';
import { e2bErrorBody } from './errors.js';
import { ENVD_VERSION } from './envd/router.js';
import { caller, type Call, type WarrenApi } from './warren-calls.js';
import { e2bTemplateRoutes } from './templates.js';

/** E2B's SDKs create with this timeout when the caller gives none. */
const DEFAULT_TIMEOUT_SECONDS = 300;
/** An access token outlives any TTL a sandbox can have; it goes when the sandbox goes. */
const ACCESS_TOKEN_TTL_SECONDS = 30 * 24 * 3600;
const CLIENT_ID = 'warren';
/** Pages of warren's list (1000 each) an E2B list reads at most. */
const MAX_LIST_PAGES = 20;

export interface ControlDeps {
  /** warren's API app: each E2B call runs as calls of it. */
  api: WarrenApi;
  /** What the entry checks every call's key with, before any handler runs. */
  access: Access;
  /** The domain of `<port>-<id>` host names, with the daemon's port (what getHost uses). */
  domain: () => string;
  /** What a sandbox gets when its create names no resources (the daemon's defaults). */
  defaults: () => ResolvedResources;
  /** Ends the envd streams open on a sandbox (a pause cuts them, as E2B's does). */
  endStreams: (sandboxId: string) => void;
  log: Logger;
}

const stateOf = (info: SandboxInfo): E2bState => (info.state === 'hibernated' || info.state === 'hibernating' ? 'paused' : 'running');

function detailOf(info: SandboxInfo, domain: string): E2bSandboxDetail {
  return {
    sandboxID: info.id,
    templateID: info.template,
    alias: info.template,
    clientID: CLIENT_ID,
    startedAt: info.createdAt,
    endAt: info.expiresAt,
    cpuCount: info.resources.cpus,
    memoryMB: info.resources.memoryMB,
    diskSizeMB: info.resources.diskMB,
    metadata: info.metadata,
    state: stateOf(info),
    envdVersion: ENVD_VERSION,
    domain,
    volumeMounts: [],
  };
}

/**
 * E2B's egress settings as a warren policy: allowOut's rules (warren's rule syntax, CIDRs
 * included), nothing when internet access is off, all of IPv4 when it is on; undefined
 * (the template's or daemon's default) when neither is said.
 */
function policyOf(internet: boolean | undefined, network: z.infer<typeof E2bNetwork> | undefined): { allow: string[] } | undefined {
  if (internet === false) return { allow: [] };
  if (network?.allowOut) return { allow: network.allowOut };
  if (internet === true) return { allow: [E2B_ALL_TRAFFIC] };
  return undefined;
}

/** warren's path of a sandbox: the id as one path segment, whatever the caller sent. */
const sandboxPath = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

/** `k=v&k2=v2`, each part URL-encoded, as the SDKs send `metadata` in a list query. */
function metadataQuery(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!text) return out;
  for (const [k, v] of new URLSearchParams(text)) out[decodeURIComponent(k)] = decodeURIComponent(v);
  return out;
}

async function jsonOf<S extends z.ZodType>(c: Context, schema: S): Promise<z.infer<S>> {
  return parse(schema, await jsonBody(c));
}

export function e2bControlRoutes(deps: ControlDeps): Hono<AuthVars> {
  const log = deps.log.child({ component: 'e2b-api' });
  const app = new Hono<AuthVars>();
  app.onError((err, c) => {
    const { status, body } = e2bErrorBody(err, log, `${c.req.method} ${c.req.path}`);
    return c.json(body, status as 400);
  });
  // The key, then the body's size, before any handler; every route below, the catch-all too.
  app.use('*', e2bEntry(deps.access));
  app.use('*', requestBodyLimit);

  /** A fresh access token for envd and port traffic: a warren token for this one sandbox. */
  const accessFor = async (call: Call, info: SandboxInfo): Promise<E2bSandbox> => {
    const made = await call<NewSandboxToken>('POST', `${sandboxPath(info.id)}/tokens`, {
      scopes: ['read', 'exec', 'files'],
      ttlSeconds: ACCESS_TOKEN_TTL_SECONDS,
    });
    return {
      sandboxID: info.id,
      templateID: info.template,
      clientID: CLIENT_ID,
      envdVersion: ENVD_VERSION,
      envdAccessToken: made.token,
      trafficAccessToken: made.token,
      domain: deps.domain(),
    };
  };

  const create = async (c: Context) => {
    const req = await jsonOf(c, E2bNewSandbox);
    const call = caller(c, deps.api);
    const network = policyOf(req.allow_internet_access, req.network);
    const body: CreateSandboxRequest = {
      template: req.templateID,
      ttlSeconds: req.timeout ?? DEFAULT_TIMEOUT_SECONDS,
      ...(req.metadata ? { metadata: req.metadata } : {}),
      ...(req.envVars ? { env: req.envVars } : {}),
      ...(network ? { network } : {}),
    };
    const info = await call<SandboxInfo>('POST', '/v1/sandboxes', body);
    try {
      return c.json(await accessFor(call, info), 201);
    } catch (err) {
      // Nothing half-made stays behind: a sandbox nobody can reach is killed.
      await call('DELETE', sandboxPath(info.id)).catch((e: unknown) => log.warn({ sandbox: info.id, err: String(e) }, 'e2b create: cleanup failed'));
      throw err;
    }
  };
  app.post('/sandboxes', create);
  app.post('/v2/sandboxes', create);

  /**
   * The caller's sandboxes in E2B's order (newest first, or `order=asc`), filtered by
   * metadata, state, template and start time, in pages of `limit` with `nextToken` an offset:
   * warren's list pages by id, so the whole list is read and ordered here.
   */
  const list = async (c: Context, states: E2bState[]) => {
    const call = caller(c, deps.api);
    const params = new URLSearchParams({ limit: '1000' });
    for (const [k, v] of Object.entries(metadataQuery(c.req.query('metadata')))) params.set(`metadata.${k}`, v);
    const all: SandboxInfo[] = [];
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const got = await call<SandboxList>('GET', `/v1/sandboxes?${params}`);
      all.push(...got.sandboxes);
      if (!got.nextCursor) break;
      params.set('cursor', got.nextCursor);
    }
    const template = c.req.query('template');
    const after = c.req.query('startedAfter') ? Date.parse(c.req.query('startedAfter') ?? '') : undefined;
    if (after !== undefined && Number.isNaN(after)) throw new WarrenError('invalid_argument', 'startedAfter must be an ISO 8601 time');
    const order = c.req.query('order') ?? 'desc';
    if (order !== 'asc' && order !== 'desc') throw new WarrenError('invalid_argument', `order must be asc or desc (got ${order})`);
    const picked = all
      .filter((s) => s.state !== 'dead' && s.state !== 'creating' && states.includes(stateOf(s)))
      .filter((s) => !template || s.template === template)
      .filter((s) => after === undefined || Date.parse(s.createdAt) >= after)
      .sort((a, b) => (Date.parse(a.createdAt) - Date.parse(b.createdAt) || a.id.localeCompare(b.id)) * (order === 'asc' ? 1 : -1));
    const limit = Math.min(Math.max(Number(c.req.query('limit') ?? 100) || 100, 1), 1000);
    const offset = Number(c.req.query('nextToken') ?? 0);
    if (!Number.isInteger(offset) || offset < 0) throw new WarrenError('invalid_argument', 'nextToken is not one this API gave');
    const page = picked.slice(offset, offset + limit);
    if (offset + limit < picked.length) c.header('x-next-token', String(offset + limit));
    return c.json(page.map((s) => detailOf(s, deps.domain())));
  };
  app.get('/sandboxes', (c) => list(c, ['running']));
  app.get('/v2/sandboxes', (c) => {
    const asked = c.req.queries('state')?.flatMap((s) => s.split(','));
    for (const s of asked ?? []) if (s !== 'running' && s !== 'paused') throw new WarrenError('invalid_argument', `state must be running or paused (got ${s})`);
    return list(c, (asked as E2bState[] | undefined) ?? ['running', 'paused']);
  });

  app.get('/sandboxes/:id', async (c) => c.json(detailOf(await caller(c, deps.api)<SandboxInfo>('GET', sandboxPath(c.req.param('id'))), deps.domain())));

  app.delete('/sandboxes/:id', async (c) => {
    await caller(c, deps.api)('DELETE', sandboxPath(c.req.param('id')));
    return c.body(null, 204);
  });

  app.post('/sandboxes/:id/timeout', async (c) => {
    const { timeout } = await jsonOf(c, E2bTimeoutRequest);
    // E2B ends a sandbox whose timeout is 0 now; warren's shortest TTL is a second.
    await caller(c, deps.api)('POST', `${sandboxPath(c.req.param('id'))}/ttl`, { ttlSeconds: Math.max(timeout, 1) });
    return c.body(null, 204);
  });

  app.post('/sandboxes/:id/refreshes', async (c) => {
    const { duration } = await jsonOf(c, E2bRefreshRequest);
    const call = caller(c, deps.api);
    const info = await call<SandboxInfo>('GET', sandboxPath(c.req.param('id')));
    // A refresh only ever extends: the later of the current end and now + duration.
    const wanted = Date.now() + (duration || DEFAULT_TIMEOUT_SECONDS) * 1000;
    if (wanted > Date.parse(info.expiresAt)) await call('POST', `${sandboxPath(info.id)}/ttl`, { ttlSeconds: Math.ceil((wanted - Date.now()) / 1000) });
    return c.body(null, 204);
  });

  app.post('/sandboxes/:id/pause', async (c) => {
    // `memory: false` (a files-only pause) has no counterpart: a hibernate always keeps memory.
    await jsonBody(c);
    const call = caller(c, deps.api);
    const info = await call<SandboxInfo>('GET', sandboxPath(c.req.param('id')));
    if (stateOf(info) === 'paused') throw new WarrenError('conflict', `sandbox ${info.id} is already paused`);
    deps.endStreams(info.id);
    await call('POST', `${sandboxPath(info.id)}/hibernate`);
    return c.body(null, 204);
  });

  /** Brings a paused sandbox back (201) or finds it running (200); a timeout only extends. */
  const connect = async (c: Context, timeout: number | undefined, mustBePaused: boolean) => {
    const call = caller(c, deps.api);
    let info = await call<SandboxInfo>('GET', sandboxPath(c.req.param('id') ?? ''));
    const paused = stateOf(info) === 'paused';
    if (mustBePaused && !paused) throw new WarrenError('conflict', `sandbox ${info.id} is already running`);
    if (info.state === 'dead') throw new WarrenError('not_found', `sandbox ${info.id} is dead: ${info.error ?? 'it stopped'}`);
    if (paused) info = await call<SandboxInfo>('POST', `${sandboxPath(info.id)}/resume`);
    if (timeout !== undefined && Date.now() + timeout * 1000 > Date.parse(info.expiresAt)) {
      info = await call<SandboxInfo>('POST', `${sandboxPath(info.id)}/ttl`, { ttlSeconds: timeout });
    }
    return c.json(await accessFor(call, info), paused ? 201 : 200);
  };
  app.post('/sandboxes/:id/connect', async (c) => connect(c, (await jsonOf(c, E2bConnectRequest)).timeout, false));
  app.post('/v2/sandboxes/:id/connect', async (c) => connect(c, (await jsonOf(c, E2bConnectRequest)).timeout, false));
  app.post('/sandboxes/:id/resume', async (c) => connect(c, (await jsonOf(c, E2bResumeRequest)).timeout, true));

  app.post('/sandboxes/:id/fork', async (c) => {
    const req = await jsonOf(c, E2bForkRequest);
    const call = caller(c, deps.api);
    const forked = await call<ForkResult>('POST', `${sandboxPath(c.req.param('id'))}/fork`, {
      count: req.count,
      ttlSeconds: req.timeout ?? DEFAULT_TIMEOUT_SECONDS,
    });
    const out = [];
    for (const child of forked.sandboxes) {
      try {
        out.push({ sandbox: await accessFor(call, child) });
      } catch (err) {
        out.push({ error: e2bErrorBody(err, log, 'fork access token').body });
      }
    }
    return c.json(out, 201);
  });

  app.put('/sandboxes/:id/network', async (c) => {
    const req = await jsonOf(c, E2bNetwork);
    await caller(c, deps.api)('PUT', `${sandboxPath(c.req.param('id'))}/network`, policyOf(req.allow_internet_access, req) ?? { allow: [] });
    return c.body(null, 204);
  });

  app.get('/sandboxes/:id/metrics', async (c) => {
    // One sample, taken now: none when the asked window (unix seconds) does not hold now.
    const now = Date.now() / 1000;
    const [start, end] = [Number(c.req.query('start') ?? -Infinity), Number(c.req.query('end') ?? Infinity)];
    const samples = await metricsOf(caller(c, deps.api), c.req.param('id'));
    return c.json(start <= now + 1 && end >= now - 1 ? samples : []);
  });

  app.route('/', e2bTemplateRoutes(deps.api, log, deps.defaults));

  // Everything else E2B has (template builds, snapshots, volumes, secrets, teams) says so plainly.
  app.all('*', (c) => {
    throw new WarrenError(
      'not_found',
      `${c.req.method} ${c.req.path.replace(/^\/e2b/, '')} is not part of warren's E2B-compatible API; see docs/e2b.md for what is (warren's own API has templates, snapshots and more under /v1)`,
    );
  });
  return app;
}

/** One sample of E2B's metrics, read from the sandbox's own /proc (cpu over 200 ms) and its disk use. */
async function metricsOf(call: Call, id: string): Promise<E2bSandboxMetric[]> {
  const info = await call<SandboxInfo>('GET', sandboxPath(id));
  if (info.state !== 'running') return [];
  const run = (cmd: string) =>
    call<{ stdout: string; exitCode: number | null }>('POST', `${sandboxPath(id)}/exec`, { argv: ['/bin/sh', '-c', cmd], user: 'root' });
  const r = await run("head -1 /proc/stat; sleep 0.2; head -1 /proc/stat; grep -E '^(MemTotal|MemAvailable|Cached):' /proc/meminfo");
  const lines = r.stdout.trim().split('\n');
  const ticks = (line: string | undefined) => (line ?? '').trim().split(/\s+/).slice(1).map(Number);
  const [a, b] = [ticks(lines[0]), ticks(lines[1])];
  const total = (t: number[]) => t.reduce((s, n) => s + (Number.isFinite(n) ? n : 0), 0);
  const idle = (t: number[]) => (t[3] ?? 0) + (t[4] ?? 0);
  const busy = total(b) - total(a) - (idle(b) - idle(a));
  const cpuUsedPct = total(b) > total(a) ? Math.round((busy / (total(b) - total(a))) * 10000) / 100 : 0;
  const kb = (name: string) => Number(/(\d+)/.exec(lines.find((l) => l.startsWith(`${name}:`)) ?? '')?.[1] ?? 0) * 1024;
  const now = new Date();
  return [
    {
      timestamp: now.toISOString(),
      timestampUnix: Math.floor(now.getTime() / 1000),
      cpuCount: info.resources.cpus,
      cpuUsedPct,
      memTotal: kb('MemTotal'),
      memUsed: kb('MemTotal') - kb('MemAvailable'),
      memCache: kb('Cached'),
      diskUsed: info.diskBytes ?? 0,
      diskTotal: info.resources.diskMB * 1024 * 1024,
    },
  ];
}
