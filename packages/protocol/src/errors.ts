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
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(ErrorCodes, value);
}

/** An error with a stable code, raised by core and by the guest agent. */
export class WarrenError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'WarrenError';
  }

  toBody(): ErrorBody {
    return { error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) } };
  }
}
