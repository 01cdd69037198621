/**
 * SDK errors. Every error the SDK throws is a WarrenError, with one class per API error code
 * (and NetworkError when the daemon cannot be reached); the one mapping from the API's stable
 * error codes to classes is `errorFromBody`. Argument order everywhere (protocol, SDK,
 * guest): code, message, options. (The Python SDK mirrors these names.)
 */
import { ErrorCodes, isErrorCode, type ErrorCode, type ExecResult } from '@warren/protocol';

/** An API error code, or `network` when no answer came from the daemon at all. */
export type WarrenErrorCode = ErrorCode | 'network';

export interface WarrenErrorOptions {
  /** The HTTP status the daemon answered with (absent for `network` and client-side errors). */
  status?: number;
  /** On server-side failures (5xx): the id the daemon's log files the details under. */
  requestId?: string;
  /** Structured facts from the error body (a field name, a step number). */
  details?: Record<string, unknown>;
  /** What failed underneath (for `network`: the connection error). */
  cause?: unknown;
}

export class WarrenError extends Error {
  // Declared, not defined: an option not given leaves no `undefined` property behind.
  declare readonly status?: number;
  declare readonly requestId?: string;
  declare readonly details?: Record<string, unknown>;

  constructor(
    readonly code: WarrenErrorCode,
    message: string,
    opts: WarrenErrorOptions = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    if (opts.status !== undefined) this.status = opts.status;
    if (opts.requestId !== undefined) this.requestId = opts.requestId;
    if (opts.details !== undefined) this.details = opts.details;
  }
}

/** `invalid_argument` (400): a field is wrong; the message names it. */
export class InvalidArgumentError extends WarrenError {}
/** `unauthenticated` (401): no API key, or a wrong one. */
export class AuthenticationError extends WarrenError {}
/** `permission_denied` (403): the sandbox user may not read or write that path. */
export class PermissionDeniedError extends WarrenError {}
/** `not_found` (404): no such sandbox, template, snapshot, file or process. */
export class NotFoundError extends WarrenError {}
/** `conflict` (409): already exists, not empty, in progress. */
export class ConflictError extends WarrenError {}
/**
 * `failed_precondition` (409): not in a state that allows the call (a process that already
 * exited, a dead sandbox). A ConflictError too, as both answer 409.
 */
export class FailedPreconditionError extends ConflictError {}
/** `too_large` (413): a body or an upload over its limit. */
export class TooLargeError extends WarrenError {}
/** `resource_exhausted` (429): no space, or no capacity, left. */
export class ResourceExhaustedError extends WarrenError {}
/** `internal` (500): a bug or a runsc failure; `requestId` finds the details in the daemon log. */
export class InternalError extends WarrenError {}
/** `unavailable` (503): the sandbox's agent is unreachable right now. */
export class UnavailableError extends WarrenError {}
/** `deadline_exceeded` (504): the agent did not answer in time. */
export class TimeoutError extends WarrenError {}
/** `network`: no answer from the daemon (not running, wrong URL, connection cut). */
export class NetworkError extends WarrenError {}

/** Thrown by `exec(..., { check: true })` when the command exits non-zero or times out. */
export class CommandError extends WarrenError {
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
  constructor(command: string, result: ExecResult) {
    const why = result.timedOut ? 'timed out' : `exited with code ${result.exitCode}`;
    const tail = result.stderr.trim().split('\n').slice(-3).join('\n');
    super('failed_precondition', `command ${JSON.stringify(command)} ${why}${tail ? `: ${tail}` : ''}`);
    this.exitCode = result.exitCode;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.timedOut = result.timedOut;
  }
}

type ErrorClass = new (code: WarrenErrorCode, message: string, opts?: WarrenErrorOptions) => WarrenError;

/** The one mapping from a code to its class. */
const CLASSES: Record<WarrenErrorCode, ErrorClass> = {
  invalid_argument: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  failed_precondition: FailedPreconditionError,
  too_large: TooLargeError,
  resource_exhausted: ResourceExhaustedError,
  internal: InternalError,
  unavailable: UnavailableError,
  deadline_exceeded: TimeoutError,
  network: NetworkError,
};

/** The error of a code, as its class. */
function errorOf(code: WarrenErrorCode, message: string, opts: WarrenErrorOptions = {}): WarrenError {
  return new CLASSES[code](code, message, opts);
}

/** The code a status stands for when the body names none (a proxy's page, a plain-text body). */
function codeOfStatus(status: number): ErrorCode {
  for (const [code, s] of Object.entries(ErrorCodes)) if (s === status && isErrorCode(code)) return code;
  return 'internal';
}

/**
 * The error for a failed response: its status and its body, `{error: {code, message,
 * details?, requestId?}}` (anything else counts as no body). The message names the request
 * of a server-side failure, whose details are in the daemon's log under that id.
 */
export function errorFromBody(status: number, body: unknown): WarrenError {
  const e = (body as { error?: { code?: unknown; message?: unknown; requestId?: unknown; details?: unknown } } | null | undefined)?.error;
  const code = isErrorCode(e?.code) ? e.code : codeOfStatus(status);
  const requestId = typeof e?.requestId === 'string' && e.requestId ? e.requestId : undefined;
  const details = e?.details && typeof e.details === 'object' ? (e.details as Record<string, unknown>) : undefined;
  const text = typeof e?.message === 'string' && e.message ? e.message : `HTTP ${status}`;
  const message = requestId ? `${text} (request ${requestId}; details in the daemon log)` : text;
  return errorOf(code, message, { status, requestId, details });
}
