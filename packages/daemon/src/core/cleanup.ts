/**
 * Undo steps collected while a multi-step operation runs; run in reverse if it fails,
 * dropped (dismissed) once the whole operation succeeded.
 */
import type { Logger } from 'pino';

export class Cleanup {
  private steps: Array<{ name: string; fn: () => unknown }> = [];

  constructor(private log: Logger) {}

  add(name: string, fn: () => unknown): void {
    this.steps.push({ name, fn });
  }

  dismiss(): void {
    this.steps = [];
  }

  async run(): Promise<void> {
    for (const step of this.steps.reverse()) {
      try {
        await step.fn();
      } catch (err) {
        this.log.error({ step: step.name, err: (err as Error).message }, 'undo step failed');
      }
    }
    this.steps = [];
  }
}
