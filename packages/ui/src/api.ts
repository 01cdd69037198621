/** Calls to the daemon's API with the session cookie, and the CSRF token on every change. */
import type { ErrorBody, UiSessionInfo } from '@warren/protocol';

let csrf = '';

class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Who is logged in (and the CSRF token), or undefined when the browser has no session. */
export async function loadSession(): Promise<UiSessionInfo | undefined> {
  const res = await fetch('/ui/session', { credentials: 'same-origin' });
  if (res.status === 401) return undefined;
  const session = (await decode(res)) as UiSessionInfo;
  csrf = session.csrf;
  return session;
}

export async function login(key: string): Promise<void> {
  await decode(await fetch('/ui/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key }) }));
}

export async function logout(): Promise<void> {
  await fetch('/ui/logout', { method: 'POST' });
}

/** A JSON call; a failure throws ApiError with the daemon's message. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = method === 'GET' ? {} : { 'x-warren-csrf': csrf };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, credentials: 'same-origin', ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  return (await decode(res)) as T;
}

/** A GET whose answer is text (a build log). */
export async function apiText(path: string): Promise<string> {
  const res = await fetch(path, { credentials: 'same-origin' });
  if (!res.ok) await decode(res);
  return res.text();
}

/** Uploads a file's bytes to a path in a sandbox. */
export async function upload(sandboxId: string, path: string, file: Blob): Promise<void> {
  const url = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/files?path=${encodeURIComponent(path)}`;
  await decode(await fetch(url, { method: 'PUT', headers: { 'x-warren-csrf': csrf, 'content-type': 'application/octet-stream' }, body: file }));
}

async function decode(res: Response): Promise<unknown> {
  if (res.status === 204) return undefined;
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    throw new ApiError(res.status, `HTTP ${res.status}: ${text.slice(0, 200)}`);
  }
  if (!res.ok) throw new ApiError(res.status, (parsed as ErrorBody | undefined)?.error?.message ?? `HTTP ${res.status}`);
  return parsed;
}
