/**
 * TTL reaper: a dead-man's switch that needs no client. Every tick it kills sandboxes whose
 * expiresAt has passed, and forgets dead records after they have been visible for a while.
 */
import type { Logger } from 'pino';
import type { Registry } from './registry.js';
import { transition } from './lifecycle.js';
import type { SandboxService } from './sandboxes.js';

const DEAD_RECORD_RETENTION_MS = 60 * 60 * 1000;

export class Reaper {
  private timer?: NodeJS.Timeout;
  private running = false;

  constructor(
    private registry: Registry,
    private sandboxes: SandboxService,
    private log: Logger,
    private intervalMs = 1000,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const now = Date.now();
      for (const r of this.registry.expired(now)) {
        this.log.info({ sandbox: r.id, expiresAt: new Date(r.expiresAt).toISOString() }, 'ttl expired; killing sandbox');
        await this.sandboxes.kill(r.id, 'ttl expired').catch((err: Error) => this.log.error({ sandbox: r.id, err: err.message }, 'reaping failed'));
      }
      for (const r of this.registry.inStates(['dead'])) {
        if (r.expiresAt + DEAD_RECORD_RETENTION_MS < now) transition(this.registry, r.id, 'remove');
      }
    } finally {
      this.running = false;
    }
  }
}
