/**
 * The one limit on request bodies, the same on every facade (/v1, /e2b, envd's Connect calls,
 * /mcp). Each facade runs it right after its credential check and before any handler reads
 * the body: a declared Content-Length over the limit is a 413 at once, nothing read; a
 * chunked body is read up to the limit and no further. An unauthenticated caller is refused
 * before this, so it cannot make the daemon read anything at all.
 */
import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { WarrenError } from '@warren/protocol';
import { E2B_ENVD_PREFIX } from './facades.js';

const MAX_JSON_BODY_BYTES = 16 * 1024 * 1024;

/** Bodies streamed into a sandbox, each limited its own way, never held in the daemon's memory. */
const STREAMED: ReadonlyArray<{ method: string; path: RegExp }> = [
  // File and directory uploads: the sandbox's disk size (routes/files.ts, routes/dirs.ts).
  { method: 'PUT', path: /^\/v1\/sandboxes\/[^/]+\/files(?:\/dir)?$/ },
  // stdin: paced by the command's reading, no size limit.
  { method: 'PUT', path: /^\/v1\/sandboxes\/[^/]+\/processes\/[^/]+\/stdin$/ },
  // envd's uploads: the sandbox's disk size (e2b/envd/files.ts).
  { method: 'POST', path: new RegExp(`^${E2B_ENVD_PREFIX}/files$`) },
];

const limit = bodyLimit({
  maxSize: MAX_JSON_BODY_BYTES,
  onError: () => {
    throw new WarrenError('too_large', `request body exceeds ${MAX_JSON_BODY_BYTES} bytes`);
  },
});

export const requestBodyLimit: MiddlewareHandler = async (c, next) => {
  if (STREAMED.some((s) => s.method === c.req.method && s.path.test(c.req.path))) return next();
  return limit(c, next);
};
