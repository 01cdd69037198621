/**
 * Sandbox records and the views of them: reading one for an operation (with the lifecycle
 * check), the API's SandboxInfo, and the record of a sandbox restored from a saved one.
 */
import path from 'node:path';
import { DEFAULT_TTL_SECONDS, WarrenError, type BootKind, type ResolvedResources, type SandboxInfo } from '@warren/protocol';
import type { TemplateInfo } from '../../templates/catalog.js';
import { newId } from '../ids.js';
import { requireState, type Operation } from '../lifecycle.js';
import type { Registry, SandboxRecord, SandboxSummary } from '../registry.js';
import type { PolicyFields } from './context.js';

/** The sandbox's record, if its state accepts the operation (lifecycle.ts); not_found if none. */
export function recordFor(registry: Registry, id: string, op: Operation): SandboxRecord {
  const r = registry.get(id);
  if (!r) throw new WarrenError('not_found', `no sandbox with id ${id}`);
  requireState(id, r.state, op, r.error);
  return r;
}

/** The sandbox as the API shows it. */
export function infoOf(registry: Registry, id: string): SandboxInfo {
  return toInfo(recordFor(registry, id, 'get'));
}

/**
 * The record of a new sandbox restored from a saved one (a fork's parent, a snapshot): its
 * template version, env, resources and key, with the request's ttl, metadata and idleSeconds.
 */
export function recordFromImage(
  from: Pick<SandboxRecord, 'template' | 'rootfs' | 'env' | 'resources' | 'metadata' | 'apiKeyId'> & Partial<PolicyFields>,
  req: {
    ttlSeconds?: number;
    metadata?: SandboxRecord['metadata'];
    idleSeconds?: number;
    env?: Record<string, string>;
    resources?: ResolvedResources;
  },
  boot: BootKind,
  source: string,
  policy?: PolicyFields,
): SandboxRecord {
  const now = Date.now();
  return {
    id: newId('sb'),
    template: from.template,
    state: 'creating',
    createdAt: now,
    expiresAt: now + (req.ttlSeconds ?? DEFAULT_TTL_SECONDS) * 1000,
    metadata: req.metadata ?? from.metadata,
    env: req.env ?? from.env,
    resources: req.resources ?? from.resources,
    rootfs: from.rootfs,
    apiKeyId: from.apiKeyId,
    boot,
    source,
    ...(req.idleSeconds ? { idleSeconds: req.idleSeconds } : {}),
    // A fork keeps its parent's policy, credentials and how it was given included; a
    // snapshot's sandbox gets the one its create resolved (createPolicy).
    ...(policy ?? {
      network: from.network ?? [],
      ...(from.networkGiven ? { networkGiven: from.networkGiven } : {}),
      ...(from.credentials?.length ? { credentials: from.credentials } : {}),
    }),
  };
}

/** The template version a sandbox is pinned to, as boot() takes it (from its record). */
export function pinnedTemplate(r: SandboxRecord): TemplateInfo {
  return { name: r.template, version: path.basename(path.dirname(r.rootfs)), rootfs: r.rootfs, env: {} };
}

export function sameResources(a: ResolvedResources, b: ResolvedResources): boolean {
  return a.cpus === b.cpus && a.memoryMB === b.memoryMB && a.pids === b.pids && a.diskMB === b.diskMB;
}

export function toInfo(r: SandboxSummary): SandboxInfo {
  return {
    id: r.id,
    template: r.template,
    // The rootfs of a template version is <templates>/<name>/<version>/rootfs.
    templateVersion: path.basename(path.dirname(r.rootfs)),
    boot: r.boot,
    state: r.state,
    createdAt: new Date(r.createdAt).toISOString(),
    expiresAt: new Date(r.expiresAt).toISOString(),
    metadata: r.metadata,
    resources: r.resources,
    ...(r.idleSeconds ? { idleSeconds: r.idleSeconds } : {}),
    ...(r.source ? { source: r.source } : {}),
    ...(r.error ? { error: r.error } : {}),
  };
}
