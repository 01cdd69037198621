/**
 * What a template version runs, shared by the bake (core/bake.ts) and by sandbox boots
 * (core/sandboxes/boot.ts): the runtime part of its manifest, starting its start command,
 * and its ready check. Its own module so that neither of the two imports the other.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import { DEFAULT_RESOURCES, WarrenError } from '@warren/protocol';
import type { TemplateInfo } from '../templates/catalog.js';
import type { GuestClient } from './guest-client.js';

const AGENT_TIMEOUT_MS = 30_000;
const READY_POLL_MS = 200;
const CHECK_POLL_MS = 25;
const DEFAULT_READY_TIMEOUT_S = 60;

/** What a template manifest says about its runtime (written by the template builder). */
export interface TemplateRuntime {
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  start?: { cmd: string; user?: string; cwd?: string };
  ready?: { cmd?: string; port?: number; timeoutSeconds?: number };
  /** The default egress policy of the version's sandboxes. */
  network?: { allow: string[] };
  /** false: the recipe opted out of baking. */
  bake?: false;
}

/** Manifests by rootfs: a version never changes (it is its recipe's hash), so read once. */
const runtimes = new Map<string, TemplateRuntime>();

/**
 * The runtime part of the manifest of the template version whose rootfs this is. A create
 * asks up to three times (bake policy, cold start, late binding), so it comes from memory.
 */
export function templateRuntime(rootfs: string): TemplateRuntime {
  const cached = runtimes.get(rootfs);
  if (cached) return cached;
  const file = path.join(path.dirname(rootfs), 'manifest.json');
  let m: Partial<TemplateRuntime>;
  try {
    m = JSON.parse(readFileSync(file, 'utf8')) as Partial<TemplateRuntime>;
  } catch (err) {
    throw new WarrenError('internal', `cannot read the manifest of template version ${path.basename(path.dirname(rootfs))}`, { cause: err });
  }
  const runtime: TemplateRuntime = {
    env: m.env ?? {},
    workdir: m.workdir,
    user: m.user,
    start: m.start,
    ready: m.ready,
    network: m.network,
    ...(m.bake === false ? { bake: false as const } : {}),
  };
  runtimes.set(rootfs, runtime);
  return runtime;
}

/** Where restorable images of baked templates come from (the Baker, for sandbox boots). */
export interface BakedImages {
  /** The image directory of the template version's bake, if one is ready. */
  imageFor(template: TemplateInfo): string | undefined;
  /** Whether the version's bake failed (its ready check never passed). */
  failed(template: TemplateInfo): boolean;
}

/**
 * Runs the template's start command and waits for its ready check, as a fresh boot of the
 * template needs (the bake, and creates that boot cold while no image is ready).
 */
export async function startTemplate(client: GuestClient, runtime: TemplateRuntime, log: Logger, opts: { waitReady: boolean }): Promise<void> {
  await client.request(
    'configure',
    { env: runtime.env, pidsLimit: DEFAULT_RESOURCES.pids, defaultUser: runtime.user, defaultCwd: runtime.workdir },
    AGENT_TIMEOUT_MS,
  );
  if (runtime.start) {
    // Not subscribed: nothing may be streaming on the channel when a checkpoint is taken.
    await client.request('exec', { cmd: runtime.start.cmd, user: runtime.start.user, cwd: runtime.start.cwd, tag: 'start', service: true }, AGENT_TIMEOUT_MS);
  }
  if (runtime.ready && opts.waitReady) await waitReady(client, runtime.ready, log);
}

/**
 * The same for a create that boots cold: a ready check that never passes is the template's
 * problem (its bake fails and says so), not a reason to refuse a usable sandbox.
 */
export async function startTemplateCold(client: GuestClient, runtime: TemplateRuntime, log: Logger, waitForReady: boolean): Promise<void> {
  try {
    await startTemplate(client, runtime, log, { waitReady: waitForReady });
  } catch (err) {
    if (!(err instanceof WarrenError && err.code === 'deadline_exceeded')) throw err;
    log.warn({ err: err.message }, 'template not ready after its start command; the sandbox is created anyway');
  }
}

/** Whether a fresh boot of the template has a start command to run or a ready check to wait for. */
export function hasStartState(runtime: TemplateRuntime): boolean {
  return runtime.start !== undefined || runtime.ready !== undefined;
}

/** Polls the ready check until it passes; fails with its last output at the timeout. */
async function waitReady(client: GuestClient, ready: NonNullable<TemplateRuntime['ready']>, log: Logger): Promise<void> {
  const timeoutMs = (ready.timeoutSeconds ?? DEFAULT_READY_TIMEOUT_S) * 1000;
  const deadline = Date.now() + timeoutMs;
  // A port check needs no tool in the image: bash opens the TCP connection itself.
  const cmd = ready.port !== undefined ? `exec 3<>/dev/tcp/127.0.0.1/${ready.port}` : ready.cmd;
  if (!cmd) throw new WarrenError('invalid_argument', 'ready check: give cmd or port');
  let last = '';
  while (Date.now() < deadline) {
    const result = await runCheck(client, cmd, deadline);
    if (result.exitCode === 0) return;
    last = `exit ${result.exitCode}: ${(result.stdout + result.stderr).trim().slice(-2000)}`;
    log.debug({ last }, 'ready check not passing yet');
    await new Promise((r) => setTimeout(r, READY_POLL_MS));
  }
  throw new WarrenError(
    'deadline_exceeded',
    `ready check (${ready.port !== undefined ? `port ${ready.port}` : cmd}) did not pass within ${timeoutMs / 1000}s; last attempt: ${last || 'none finished'}`,
  );
}

async function runCheck(client: GuestClient, cmd: string, deadline: number): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
  const remaining = Math.max(1000, deadline - Date.now());
  const { pid } = await client.request('exec', { cmd, user: 'root', timeoutMs: remaining, tag: 'ready-check' }, AGENT_TIMEOUT_MS);
  for (;;) {
    const out = await client.request('proc.output', { pid }, AGENT_TIMEOUT_MS);
    if (!out.running) {
      // Not to be listed in every sandbox restored from the image.
      await client.request('proc.forget', { pid }, AGENT_TIMEOUT_MS);
      return { exitCode: out.exitCode, stdout: out.stdout, stderr: out.stderr };
    }
    await new Promise((r) => setTimeout(r, CHECK_POLL_MS));
  }
}
