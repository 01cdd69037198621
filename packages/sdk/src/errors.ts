/**
 * SDK errors. Every error the SDK throws is a WarrenError; the one mapping from the API's
 * stable error codes to classes is `errorFromBody`. (The Python SDK mirrors these names.)
 */
import type { ErrorCode, ExecResult } from '@warren/protocol';

export class WarrenError extends Error {
  constructor(
    message: string,
    readonly code: ErrorCode | 'network',
    readonly status?: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}
export class InvalidArgumentError extends WarrenError {}
export class AuthenticationError extends WarrenError {}
export class PermissionDeniedError extends WarrenError {}
export class NotFoundError extends WarrenError {}
export class ConflictError extends WarrenError {}
export class TooLargeError extends WarrenError {}
export class ResourceExhaustedError extends WarrenError {}
export class UnavailableError extends WarrenError {}
export class TimeoutError extends WarrenError {}
export class InternalError extends WarrenError {}

/** Thrown by `exec(..., { check: true })` when the command exits non-zero or times out. */
export class CommandError extends WarrenError {
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
  constructor(command: string, result: ExecResult) {
    const why = result.timedOut ? 'timed out' : `exited with code ${result.exitCode}`;
    const tail = result.stderr.trim().split('\n').slice(-3).join('\n');
    super(`command ${JSON.stringify(command)} ${why}${tail ? `: ${tail}` : ''}`, 'failed_precondition');
    this.exitCode = result.exitCode;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.timedOut = result.timedOut;
  }
}

const CLASSES: Partial<Record<ErrorCode, new (m: string, c: ErrorCode, s?: number) => WarrenError>> = {
  invalid_argument: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  failed_precondition: ConflictError,
  too_large: TooLargeError,
  resource_exhausted: ResourceExhaustedError,
  unavailable: UnavailableError,
  deadline_exceeded: TimeoutError,
  internal: InternalError,
};

export function errorFromBody(status: number, body: unknown): WarrenError {
  const e = (body as { error?: { code?: ErrorCode; message?: string; requestId?: string } } | undefined)?.error;
  const code: ErrorCode = e?.code ?? (status === 404 ? 'not_found' : status === 401 ? 'unauthenticated' : 'internal');
  const Cls = CLASSES[code] ?? WarrenError;
  // A server-side failure names its request: the daemon's log has the details under that id.
  const message = `${e?.message ?? `HTTP ${status}`}${e?.requestId ? ` (request ${e.requestId}; details in the daemon log)` : ''}`;
  return new Cls(message, code, status);
}
