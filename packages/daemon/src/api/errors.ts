/** The one place where an error kind becomes an HTTP status and a JSON body. */
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { ErrorCodes, WarrenError, errorText, type ErrorBody } from '@warren/protocol';

// Zod errors become one invalid_argument message (protocol/src/validation.ts).
export { parse } from '@warren/protocol';
import type { Logger } from 'pino';

/**
 * A server-side failure (5xx) answers with the code, the message (what failed, in the
 * caller's terms) and the request's id, never the cause: runsc's output, host paths and
 * stacks go to the log under that id, for the operator (`grep <id>` in the daemon log).
 */
export function errorResponse(c: Context, err: unknown, log: Logger): Response {
  const e = toWarrenError(err);
  const status = ErrorCodes[e.code] as ContentfulStatusCode;
  // A limit that frees itself with time says when (quotas per minute).
  const retryAfter = e.details?.retryAfterSeconds;
  if (typeof retryAfter === 'number') c.header('Retry-After', String(retryAfter));
  if (!e.isServerSide) return c.json(e.toBody() satisfies ErrorBody, status);
  const requestId = (c.get('requestId') as string | undefined) ?? 'unknown';
  log.error(
    { requestId, method: c.req.method, path: c.req.path, code: e.code, err: errorText(e), stack: (e.cause instanceof Error ? e.cause : e).stack },
    'request failed',
  );
  return c.json({ error: { code: e.code, message: e.message, requestId } } satisfies ErrorBody, status);
}

export function toWarrenError(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  if (err instanceof SyntaxError) return new WarrenError('invalid_argument', `request body is not valid JSON: ${err.message}`);
  // A bug: the caller learns only that it happened; the log has what and where.
  return new WarrenError('internal', 'internal error', { cause: err });
}

/** A 400 whose message names each bad field and, for a bound, the limit and the value given. */
export async function jsonBody(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new WarrenError('invalid_argument', `request body is not valid JSON: ${(err as Error).message}`);
  }
}
