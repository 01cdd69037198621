/** /v1/sandboxes: create, list, get, kill, ttl, hibernate, resume, fork, snapshot, databases. */
import { Hono } from 'hono';
import {
  AttachDatabaseRequest,
  CreateSandboxTokenRequest,
  type SandboxTokenList,
  CreateSandboxRequest,
  CreateSnapshotRequest,
  ForkRequest,
  NetworkPolicy,
  SandboxStates,
  SetTtlRequest,
  WarrenError,
  type EgressList,
  type SandboxDatabaseList,
  type SandboxState,
} from '@warren/protocol';
import { publicEgressEntry, type EgressLog } from '../../network/audit.js';
import type { SandboxService } from '../../core/sandboxes.js';
import type { WorkspaceDatabases } from '../../databases/workspaces.js';
import type { SnapshotService } from '../../core/snapshots.js';
import { holding } from '../../keys/quotas.js';
import type { Principal } from '../../keys/service.js';
import { requireAccess, requireEgressGrant, requireScope, type Access, type AuthVars } from '../auth.js';
import { jsonBody, parse } from '../errors.js';

export function sandboxRoutes(
  sandboxes: SandboxService,
  snapshots: SnapshotService,
  egress: EgressLog,
  databases: WorkspaceDatabases,
  access: Access,
): Hono<AuthVars> {
  const app = new Hono<AuthVars>();
  const { owners, quotas, tokens } = access;

  app.post('/', async (c) => {
    const req = parse(CreateSandboxRequest, await jsonBody(c));
    const p = c.get('principal');
    // Widening egress beyond the defaults is network:write's; a snapshot must be the caller's own.
    if (req.network?.allow.length) {
      requireScope(p, 'network:write', 'a create with network.allow');
      requireEgressGrant(p, req.network.allow);
    }
    if (req.snapshot) requireAccess(p, owners, 'snapshot', req.snapshot);
    else access.templates.resolve(p, req.template);
    if (req.databases?.length) requireScope(p, 'databases', 'a create with databases');
    // Each database made for it is a sandbox of the key too.
    const newDatabases = databases.missing(req.databases ?? []).map(() => sandboxes.resourcesFor(undefined));
    const made = await holding(quotas.admit(p, 'create', 1, sandboxes.resourcesFor(req.resources), newDatabases), () => databases.create(req, p.keyId));
    c.set('createdSandbox', made.id);
    return c.json(made, 201);
  });

  app.get('/', (c) => {
    const state = c.req.query('state');
    if (state !== undefined && !SandboxStates.includes(state as SandboxState)) {
      throw new WarrenError('invalid_argument', `state must be one of ${SandboxStates.join(', ')}`);
    }
    const limit = optionalInteger(c.req.query('limit'), 'limit', 1, 1000) ?? 100;
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(c.req.query())) {
      if (k.startsWith('metadata.')) metadata[k.slice('metadata.'.length)] = v;
    }
    const p = c.get('principal');
    return c.json(
      sandboxes.list({ state: state as SandboxState | undefined, metadata, limit, cursor: c.req.query('cursor'), ...(p.admin ? {} : { apiKeyId: p.keyId }) }),
    );
  });

  app.get('/:id', async (c) => c.json(await sandboxes.getWithDisk(c.req.param('id'))));

  app.get('/:id/network', (c) => c.json(sandboxes.getNetwork(c.req.param('id'))));

  app.put('/:id/network', async (c) => {
    const policy = parse(NetworkPolicy, await jsonBody(c));
    requireEgressGrant(c.get('principal'), policy.allow);
    return c.json(await sandboxes.setNetwork(c.req.param('id'), policy));
  });

  app.get('/:id/egress', (c) => {
    const id = c.req.param('id');
    sandboxes.get(id); // 404 for unknown sandboxes
    const after = optionalInteger(c.req.query('after'), 'after', 0, Number.MAX_SAFE_INTEGER);
    const limit = optionalInteger(c.req.query('limit'), 'limit', 1, 1000) ?? 100;
    const entries = egress.list(id, { afterId: after, limit }).map(publicEgressEntry);
    return c.json({ entries } satisfies EgressList);
  });

  app.post('/:id/hibernate', async (c) => c.json(await sandboxes.hibernate(c.req.param('id'))));

  app.post('/:id/resume', async (c) => c.json(await sandboxes.resume(c.req.param('id'))));

  app.post('/:id/fork', async (c) => {
    const req = parse(ForkRequest, await jsonBody(c));
    const id = c.req.param('id');
    // Each child gets a branch of each of the parent's databases.
    const branches = Array.from({ length: req.count * databases.list(id).length }, () => sandboxes.resourcesFor(undefined));
    const admitted = quotas.admit(c.get('principal'), 'fork', req.count, sandboxes.resourcesOf(id), branches);
    return c.json(await holding(admitted, () => databases.fork(id, req)), 201);
  });

  app.get('/:id/databases', (c) => c.json({ databases: databases.list(c.req.param('id')) } satisfies SandboxDatabaseList));

  app.post('/:id/databases', async (c) => {
    const req = parse(AttachDatabaseRequest, await jsonBody(c));
    const admitted = databases.missing([req.name]).length ? quotas.admit(c.get('principal'), 'create', 1, sandboxes.resourcesFor(undefined)) : undefined;
    return c.json(await holding(admitted, () => databases.attach(c.req.param('id'), req.name, c.get('apiKeyId'))), 201);
  });

  app.post('/:id/snapshots', async (c) => {
    const req = parse(CreateSnapshotRequest, await jsonBody(c));
    return c.json(await snapshots.create(c.req.param('id'), req.metadata, c.get('apiKeyId')), 201);
  });

  // Tokens are made and handled with a key, never with a token.
  const keyOnly = (p: Principal) => {
    if (p.tokenId) throw new WarrenError('permission_denied', `token ${p.tokenId} cannot manage tokens; use an API key`);
  };

  app.post('/:id/tokens', async (c) => {
    const req = parse(CreateSandboxTokenRequest, await jsonBody(c));
    keyOnly(c.get('principal'));
    return c.json(tokens.create(c.get('principal'), sandboxes.get(c.req.param('id')).id, req), 201);
  });

  app.get('/:id/tokens', (c) => {
    keyOnly(c.get('principal'));
    return c.json({ tokens: tokens.list(sandboxes.get(c.req.param('id')).id) } satisfies SandboxTokenList);
  });

  app.delete('/:id/tokens/:tokenId', (c) => {
    keyOnly(c.get('principal'));
    return c.json(tokens.revoke(sandboxes.get(c.req.param('id')).id, c.req.param('tokenId')));
  });

  app.delete('/:id', async (c) => {
    await sandboxes.kill(c.req.param('id'));
    return c.body(null, 204);
  });

  app.post('/:id/ttl', async (c) => {
    const { ttlSeconds } = parse(SetTtlRequest, await jsonBody(c));
    return c.json(sandboxes.setTtl(c.req.param('id'), ttlSeconds));
  });

  return app;
}

function optionalInteger(text: string | undefined, name: string, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max) throw new WarrenError('invalid_argument', `${name} must be an integer from ${min} to ${max}`);
  return n;
}
