/**
 * Every credential warren reads from a request, named once. The daemon's checks read them by
 * these names, and a port URL takes each one out before the request reaches the server in
 * the sandbox (docs/security.md): the code there is hostile, and a credential a client meant
 * for warren must never reach it. A new credential goes here, or the daemon's unit test that
 * lists every header it reads fails.
 */

/** Headers that carry a secret (names in lower case, as node and fetch give them). */
export const CREDENTIAL_HEADER = {
  /** `Bearer KEY`: an API key or a sandbox token. */
  authorization: 'authorization',
  /** An API key, as E2B's SDKs send it. */
  apiKey: 'x-api-key',
  /** E2B's envd calls: the sandbox's envdAccessToken (a sandbox token). */
  envdAccessToken: 'x-access-token',
  /** E2B's port host names: the sandbox's trafficAccessToken (a sandbox token). */
  trafficAccessToken: 'e2b-traffic-access-token',
  /** The dashboard session's CSRF token. */
  csrf: 'x-warren-csrf',
} as const;

/** Cookies that carry a secret. */
export const CREDENTIAL_COOKIE = {
  /** The dashboard's browser session (it acts as an API key). */
  session: 'warren_session',
  /** A port URL's signed token, kept by the browser for that origin. */
  portToken: 'warren_port_token',
} as const;

/** The query parameter a port URL carries its signed token in. */
export const PORT_TOKEN_PARAM = 'warren_token';

export const CREDENTIAL_HEADERS: readonly string[] = Object.values(CREDENTIAL_HEADER);
export const CREDENTIAL_COOKIES: readonly string[] = Object.values(CREDENTIAL_COOKIE);
