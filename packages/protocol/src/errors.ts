/**
 * Stable error codes. The daemon maps a code to an HTTP status in one place
 * (daemon/src/api/errors.ts); each SDK maps a code back to an error class in one place.
 * Codes are part of the public contract: add, never rename.
 */
export const ErrorCodes = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  conflict: 409,
  /** The sandbox is not in a state that allows the operation (e.g. it is dead). */
  failed_precondition: 409,
  too_large: 413,
  resource_exhausted: 429,
  internal: 500,
  unavailable: 503,
  deadline_exceeded: 504,
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export interface ErrorBody {
  /** requestId: on server-side failures (5xx), the id the daemon's log files the details under. */
  error: { code: ErrorCode; message: string; details?: Record<string, unknown>; requestId?: string };
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ErrorCodes, value);
}

export interface WarrenErrorOptions {
  /** Structured, caller-facing facts (a field name, a step number); sent in the body. */
  details?: Record<string, unknown>;
  /**
   * What went wrong underneath (runsc's stderr, a host path, an errno): logged by the daemon
   * under the request's id, never sent to the caller.
   */
  cause?: unknown;
}

/** An error's message with its causes, for logs (never for API bodies: causes hold internals). */
export function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause === undefined ? '' : `: ${errorText(err.cause)}`;
  return `${err.message}${cause}`;
}

/**
 * An error with a stable code, raised by core and by the guest agent. The message is for the
 * caller, in the caller's terms; whatever only the operator should see goes in `cause`.
 * Argument order everywhere (protocol, SDK, guest): code, message, options.
 */
export class WarrenError extends Error {
  readonly details?: Record<string, unknown>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    opts: WarrenErrorOptions = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'WarrenError';
    if (opts.details) this.details = opts.details;
  }

  /** A server-side failure (5xx): the caller gets code and message only, never the cause. */
  get isServerSide(): boolean {
    return ErrorCodes[this.code] >= 500;
  }

  toBody(): ErrorBody {
    return { error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) } };
  }
}
