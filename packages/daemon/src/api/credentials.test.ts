/**
 * Port URLs strip every credential warren reads (protocol/credentials.ts) before a request
 * reaches the app in the sandbox. This test keeps that list whole: it reads the daemon's own
 * sources for every request header and cookie they read, and fails on one that is neither in
 * the list nor known here not to be a secret. So a new credential cannot be read without
 * being stripped from port URLs too.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CREDENTIAL_COOKIE, CREDENTIAL_COOKIES, CREDENTIAL_HEADER, CREDENTIAL_HEADERS } from '@warren/protocol';
import { SANDBOX_ID_HEADER } from '../e2b/envd/call.js';
import { CSRF_HEADER, SESSION_COOKIE } from './ui-sessions.js';

/** The daemon's sources (this file runs from dist/api/). */
const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src');

/** Headers the daemon reads that carry no secret, and why each is safe to pass to an app. */
const NOT_CREDENTIALS = new Set([
  'host',
  'origin',
  'user-agent',
  'content-length',
  'content-type',
  'content-encoding',
  'transfer-encoding',
  'if-none-match',
  'upgrade',
  // Read for its cookies, each checked below.
  'cookie',
  // Read for a terminal's bearer subprotocol: port URLs take those entries out (network/ports.ts).
  'sec-websocket-protocol',
  // E2B's envd: which sandbox, and how often to ping; no secret.
  'e2b-sandbox-id',
  'keepalive-ping-interval',
]);

/** Constants the sources read headers and cookies by, resolved to their values. */
const CONSTANTS: Record<string, string> = { CSRF_HEADER, SANDBOX_ID_HEADER, SESSION_COOKIE };
for (const [key, value] of Object.entries(CREDENTIAL_HEADER)) CONSTANTS[`CREDENTIAL_HEADER.${key}`] = value;
for (const [key, value] of Object.entries(CREDENTIAL_COOKIE)) CONSTANTS[`CREDENTIAL_COOKIE.${key}`] = value;

/** Where a header or cookie name is read, the name in group 1. */
const HEADER_READS = [
  /\.header\(\s*([^,()]+?)\s*\)/g, // Hono: c.req.header(NAME) (one argument: two set a response header)
  /headers\.get\(\s*([^,()]+?)\s*\)/g, // fetch's Headers
  /headers\[\s*([^\]]+?)\s*\](?!\s*=[^=])/g, // node's IncomingMessage, not an assignment
  /\.headers\.([a-z]+)\b(?!\s*[(=])/g, // req.headers.cookie
];
// A call, not the function's own declaration (whose arguments have types).
const COOKIE_READS = [/getCookie\(\s*\w+\s*,\s*([\w.'"-]+)\s*\)/g, /cookieValue\(\s*[\w.]+\s*,\s*([\w.'"-]+)\s*\)/g];

/**
 * The daemon's non-test sources, except the egress proxy's (network/): those read the
 * sandbox's own outgoing requests, which carry none of warren's credentials.
 */
function sources(dir = SRC): Array<{ file: string; text: string }> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return full === path.join(SRC, 'network') ? [] : sources(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [{ file: path.relative(SRC, full), text: readFileSync(full, 'utf8') }] : [];
  });
}

/** A read's name: a string literal, a known constant, or (dynamic, e.g. a loop variable) undefined. */
function nameOf(arg: string, where: string): string {
  const literal = /^(['"])([^'"]*)\1$/.exec(arg);
  if (literal) return literal[2]!.toLowerCase();
  if (/^[a-z]+$/.test(arg)) return arg; // req.headers.cookie
  const value = CONSTANTS[arg];
  assert.ok(value !== undefined, `${where} reads a header or cookie named by ${arg}: add it to CONSTANTS in this test`);
  return value;
}

test('every request header and cookie the daemon reads is a listed credential or known to hold none', () => {
  const files = sources();
  assert.ok(files.length > 50, `only ${files.length} sources found under ${SRC}`);
  const headers = new Set<string>();
  const cookies = new Set<string>();
  for (const { file, text } of files) {
    for (const re of HEADER_READS) for (const m of text.matchAll(re)) headers.add(nameOf(m[1]!, file));
    for (const re of COOKIE_READS) for (const m of text.matchAll(re)) cookies.add(nameOf(m[1]!, file));
  }
  // The reads the auth code is known to make are found, so the patterns still match it.
  for (const name of ['authorization', 'x-api-key', 'x-access-token', 'e2b-traffic-access-token', 'x-warren-csrf']) assert.ok(headers.has(name), name);
  assert.ok(cookies.has('warren_session'));

  const unknown = [...headers].filter((h) => !CREDENTIAL_HEADERS.includes(h) && !NOT_CREDENTIALS.has(h));
  assert.deepEqual(unknown, [], 'headers read by the daemon: a credential goes in protocol/credentials.ts, anything else in NOT_CREDENTIALS here');
  const unlisted = [...cookies].filter((c) => !CREDENTIAL_COOKIES.includes(c));
  assert.deepEqual(unlisted, [], 'cookies read by the daemon: each goes in CREDENTIAL_COOKIE (protocol/credentials.ts)');
});
