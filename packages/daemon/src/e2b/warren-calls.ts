/**
 * E2B's control plane runs as calls of warren's own /v1 API, in process, with the caller's
 * key: keys, scopes, ownership, quotas and the audit trail apply exactly as they do there.
 */
import type { Context } from 'hono';
import { WarrenError, isErrorCode } from '@warren/protocol';

/** warren's API app: each E2B call runs as calls of it. */
export interface WarrenApi {
  fetch(req: Request, env?: unknown): Response | Promise<Response>;
}

/** One warren API call with the caller's key; its error, if any, thrown as a WarrenError. */
export type Call = <T>(method: string, path: string, body?: unknown) => Promise<T>;

/** The key an E2B call carries (E2B's SDKs send X-API-Key): the one its entry checks and its calls pass on. */
export function e2bApiKey(c: Context): string {
  return c.req.header('x-api-key') ?? '';
}

/** A call of warren's API as it answers (for streamed answers). */
export function rawCall(c: Context, api: WarrenApi) {
  const key = e2bApiKey(c);
  return async (method: string, path: string, body?: unknown): Promise<Response> => {
    const headers: Record<string, string> = { 'x-api-key': key, 'user-agent': `e2b-compat (${c.req.header('user-agent') ?? 'unknown'})` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await api.fetch(
      new Request(`http://warren.internal${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) }),
      c.env,
    );
    if (!res.ok) {
      const json = (await res.json().catch(() => ({}))) as { error?: { code?: unknown; message?: string } };
      const code = isErrorCode(json.error?.code) ? json.error.code : 'internal';
      throw new WarrenError(code, json.error?.message ?? `warren answered ${res.status}`);
    }
    return res;
  };
}

export function caller(c: Context, api: WarrenApi): Call {
  const raw = rawCall(c, api);
  return async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const res = await raw(method, path, body);
    return (res.status === 204 ? undefined : await res.json()) as T;
  };
}
