/**
 * Hibernate, resume, fork and snapshot of one sandbox run one at a time, in order: each
 * changes or reads the sandbox's machine state, which two of them cannot share.
 */
export class SerialOperations {
  private operations = new Map<string, Promise<unknown>>();

  /** Whether an operation on the sandbox is queued or running (its channel may be quiesced). */
  busy(id: string): boolean {
    return this.operations.has(id);
  }

  /** Runs fn after every earlier hibernate/resume/fork/snapshot of the sandbox has finished. */
  serialized<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const before = this.operations.get(id) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.operations.set(id, settled);
    void settled.then(() => {
      if (this.operations.get(id) === settled) this.operations.delete(id);
    });
    return run;
  }
}
