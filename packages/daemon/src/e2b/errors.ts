/**
 * Warren's errors in E2B's terms: a Connect code for envd's RPCs, `{ code, message }` with the
 * HTTP status for the control plane and envd's REST routes. Server-side failures keep their
 * cause out of the answer, as everywhere in the API (api/errors.ts).
 */
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import { ErrorCodes, errorText, type ErrorCode } from '@warren/protocol';
import { toWarrenError } from '../api/errors.js';

const CONNECT_CODE: Record<ErrorCode, Code> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  conflict: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  too_large: Code.ResourceExhausted,
  resource_exhausted: Code.ResourceExhausted,
  internal: Code.Internal,
  unavailable: Code.Unavailable,
  deadline_exceeded: Code.DeadlineExceeded,
};

/** A thrown error as the ConnectError an envd RPC answers with; 5xx causes go to the log only. */
export function toConnectError(err: unknown, log: Logger, what: string): ConnectError {
  if (err instanceof ConnectError) return err;
  const e = toWarrenError(err);
  if (e.isServerSide) log.error({ what, code: e.code, err: errorText(e), stack: (e.cause instanceof Error ? e.cause : e).stack }, 'e2b envd call failed');
  return new ConnectError(e.message, CONNECT_CODE[e.code]);
}

/** E2B's error body (`{ code, message }`, code = the HTTP status) and its status. */
export function e2bErrorBody(err: unknown, log: Logger, what: string): { status: number; body: { code: number; message: string } } {
  const e = toWarrenError(err);
  const status = ErrorCodes[e.code];
  if (e.isServerSide) log.error({ what, code: e.code, err: errorText(e), stack: (e.cause instanceof Error ? e.cause : e).stack }, 'e2b call failed');
  return { status, body: { code: status, message: e.message } };
}
