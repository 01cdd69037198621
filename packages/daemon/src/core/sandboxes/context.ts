/**
 * What the parts of the sandbox service share: the options it was built with, the in-memory
 * maps of live guest channels, and the types of the services it is given. The registry
 * holds the durable truth; these maps hold only what a process owns (channels, timers).
 */
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { BootKind, ResolvedResources } from '@warren/protocol';
import type { EgressPolicy } from '../../network/policy.js';
import type { Presets } from '../../network/presets.js';
import type { SandboxDriver, GuestStreams } from '../../drivers/driver.js';
import type { TemplateCatalog } from '../../templates/catalog.js';
import type { WarmPool } from '../pool.js';
import type { BakedImages } from '../template-start.js';
import type { GuestClient } from '../guest-client.js';
import type { Registry, SandboxRecord } from '../registry.js';
import type { ImageStore } from '../images.js';
import type { HostCapacity } from '../admission.js';

export const AGENT_READY_TIMEOUT_MS = 30_000;

export interface Live {
  client: GuestClient;
  streams: GuestStreams;
  missed: number;
  checking: boolean;
  /**
   * The channel goes through an attach relay: the agent's stdio channel ended with the
   * daemon that started it (a restart), so every later image of it needs a relay too.
   */
  relayed: boolean;
}

export interface SandboxServiceOptions {
  registry: Registry;
  driver: SandboxDriver;
  templates: TemplateCatalog;
  log: Logger;
  /** What one sandbox may have at most on this host (admission.ts); absent: no host check. */
  capacity?: HostCapacity;
  pool?: WarmPool;
  /** Boot pool members at a low CPU weight (default true; WARREN_POOL_BACKGROUND=0 for measurements). */
  poolBackground?: boolean;
  bakes?: BakedImages;
  meter?: ActivityMeter;
  images: ImageStore;
  /** Most children one fork may ask for (default DEFAULT_MAX_FORK_COUNT). */
  maxForkCount?: number;
  /** The daemon's egress proxy (network/proxy.ts); without it tunnels are refused. */
  egress?: EgressServer;
  /** Per-sandbox CAs for credential brokering (network/ca.ts); without it credentials are refused. */
  egressCa?: EgressCaStore;
  /** Expands `@github` and the like (network/presets.ts); default: read from this host. */
  presets?: Presets;
  /** The policy of a create that gives none and whose template has none (WARREN_DEFAULT_ALLOW). */
  defaultAllow?: string[];
}

/** A sandbox record's egress fields, from a policy as given. */
export type PolicyFields = Pick<SandboxRecord, 'network' | 'networkGiven' | 'credentials'>;

/** What the sandbox service needs of the per-sandbox CA store. */
export interface EgressCaStore {
  /** The sandbox's CA certificate (PEM), created on first use. */
  ensure(sandboxId: string): Promise<string>;
  remove(sandboxId: string): Promise<void>;
}

/** What the sandbox service needs of the egress proxy. */
export interface EgressServer {
  serve(conn: Duplex, sandboxId: string, policy: () => EgressPolicy): void;
  closeAll(sandboxId: string): void;
}

/** Where a sandbox boots from instead of its template: a saved image. */
export interface ImageSource {
  image: string;
  kind: BootKind;
}

/** Metering of the time a sandbox runs (core/usage.ts): hibernated time is not billed. */
export interface ActivityMeter {
  /** The sandbox runs, and is billed for these resources, from `at` (default now). */
  start(id: string, apiKeyId: string, resources: ResolvedResources, at?: number): void;
  /** It stops being billed (hibernated, killed, died). Idempotent. */
  stop(id: string, at?: number): void;
}

/** The state every part of the service shares, made once by the facade (sandboxes.ts). */
export interface SandboxContext {
  readonly opts: SandboxServiceOptions;
  /** Guest channels of registered sandboxes, by id. */
  readonly live: Map<string, Live>;
  /** Booted warm-pool members, not yet claimed (and not in the registry). */
  readonly pooled: Map<string, Live>;
  /** When each sandbox last saw activity (an API call on it, a running command). */
  readonly lastActive: Map<string, number>;
  /** What a create leaves out: the protocol's defaults, cut down to this host. */
  readonly defaults: ResolvedResources;
}
