/** The one place where an error kind becomes an HTTP status and a JSON body. */
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { z } from 'zod';
import { ErrorCodes, WarrenError, type ErrorBody } from '@warren/protocol';
import type { Logger } from 'pino';

export function errorResponse(c: Context, err: unknown, log: Logger): Response {
  const e = toWarrenError(err);
  if (e.code === 'internal') log.error({ err: err instanceof Error ? err.stack : String(err), path: c.req.path }, 'internal error');
  return c.json(e.toBody() satisfies ErrorBody, ErrorCodes[e.code] as ContentfulStatusCode);
}

export function toWarrenError(err: unknown): WarrenError {
  if (err instanceof WarrenError) return err;
  if (err instanceof SyntaxError) return new WarrenError('invalid_argument', `request body is not valid JSON: ${err.message}`);
  // Never leak internals (paths, stacks) to callers; the log has them.
  return new WarrenError('internal', 'internal error; see the daemon log');
}

export function validationError(error: z.ZodError): WarrenError {
  const issues = error.issues.map((i) => `${i.path.length ? i.path.join('.') : 'body'}: ${i.message}`);
  return new WarrenError('invalid_argument', `invalid request: ${issues.join('; ')}`, { issues });
}

export function parse<T extends z.ZodTypeAny>(schema: T, input: unknown): z.output<T> {
  const r = schema.safeParse(input);
  if (!r.success) throw validationError(r.error);
  return r.data;
}

export async function jsonBody(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new WarrenError('invalid_argument', `request body is not valid JSON: ${(err as Error).message}`);
  }
}
