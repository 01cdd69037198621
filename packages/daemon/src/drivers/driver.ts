/**
 * The narrow interface every isolation driver implements. Core owns ids, state and the
 * guest protocol; a driver only starts, attaches to, inspects and destroys sandboxes.
 */
import type { Readable, Writable } from 'node:stream';
import type { ResolvedResources } from '@warren/protocol';

export interface GuestStreams {
  /** Bytes from the agent. */
  fromGuest: Readable;
  /** Bytes to the agent. */
  toGuest: Writable;
  /** Releases host resources held only for this channel (an attach relay process). */
  release(): void;
  /**
   * For an attach relay: ends it and resolves once it has exited inside the sandbox, so that
   * a checkpoint does not hold it (its host descriptors cannot be restored).
   */
  detach?(): Promise<void>;
}

export interface StartSpec {
  id: string;
  hostname: string;
  rootfs: string;
  resources: ResolvedResources;
  /**
   * Boot at a low host CPU weight: nobody waits for this sandbox yet (a warm-pool member, a
   * bake), so the sandboxes serving requests come first. promote() lifts it.
   */
  background?: boolean;
}

export interface DriverSandbox {
  id: string;
  running: boolean;
}

export interface DeathCause {
  oomKilled: boolean;
  pidsExhausted: boolean;
}

export interface SandboxDriver {
  readonly name: string;
  /** Boots the sandbox and returns the init agent's stdio channel. */
  start(spec: StartSpec): Promise<GuestStreams>;
  /** Brings a sandbox up from a checkpoint image; returns the restored agent's channel. */
  restore(spec: StartSpec, imageDir: string): Promise<GuestStreams>;
  /**
   * Saves the sandbox's memory, processes and files to imageDir. The sandbox stops, unless
   * leaveRunning: then it is paused only while the image is written.
   */
  checkpoint(id: string, imageDir: string, opts?: { leaveRunning?: boolean }): Promise<void>;
  /** Gives a sandbox booted in the background the host CPU weight of every other sandbox. */
  promote(id: string): Promise<void>;
  /** New cpu, memory and pids limits for a running sandbox (a warm-pool claim). */
  resize(id: string, resources: ResolvedResources): Promise<void>;
  /** A fresh channel to an already running sandbox's agent (after a daemon restart). */
  attach(id: string): Promise<GuestStreams>;
  /** Stops and removes everything the sandbox holds on the host. Idempotent. */
  destroy(id: string): Promise<void>;
  /** destroy() for a sandbox that a checkpoint just stopped: only its leftovers remain. */
  removeStopped(id: string): Promise<void>;
  list(): Promise<DriverSandbox[]>;
  /** Best-effort reason for a sandbox that stopped answering. */
  diagnose(id: string): Promise<DeathCause>;
  /** Bytes of host disk the sandbox's own writes occupy. */
  diskUsage(id: string): Promise<number>;
  /** CPU time used so far and memory held now, from the sandbox's cgroup; undefined: not running. */
  usageNow(id: string): Promise<{ cpuNanos: number; memoryBytes: number } | undefined>;
  /** An upper estimate of the bytes a checkpoint of the sandbox writes (its memory and own files). */
  imageSizeEstimate(id: string): Promise<number>;
}
