/**
 * The dashboard's browser sessions (docs/dashboard.md, "Logging in"). A session stands for
 * the API key that opened it: every call the dashboard makes is checked as that key's call,
 * so a revoked key ends its sessions at their next request. A login link carries a one-time
 * token that lives a minute; the session it opens lives in an HttpOnly, SameSite=Strict
 * cookie, and every call that changes something also carries the session's CSRF token in a
 * header, which a page of another origin can neither read nor send.
 *
 * Sessions live in the daemon's memory: a restart logs every browser out.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { CREDENTIAL_COOKIE, CREDENTIAL_HEADER } from '@warren/protocol';

/** How long a login link works, and only once. */
const LOGIN_TOKEN_TTL_MS = 60_000;
/** How long a session lasts after its last request. */
export const SESSION_IDLE_MS = 12 * 3_600_000;
/** The cookie the session lives in (host-only: port URLs, on other hosts, never see it). */
export const SESSION_COOKIE = CREDENTIAL_COOKIE.session;
/** The header that carries the session's CSRF token on calls that change something. */
export const CSRF_HEADER = CREDENTIAL_HEADER.csrf;
/** Most sessions and unredeemed login tokens kept; the oldest go first. */
const MAX_ENTRIES = 10_000;

interface Entry {
  /** The key (or sandbox token) the session acts as. */
  secret: string;
  expiresAt: number;
  csrf: string;
}

export interface UiSession {
  secret: string;
  csrf: string;
}

export class UiSessions {
  private readonly logins = new Map<string, Entry>();
  private readonly sessions = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A one-time login token for the caller's key. */
  issueLogin(secret: string): { token: string; expiresAt: number } {
    const token = randomToken();
    const expiresAt = this.now() + LOGIN_TOKEN_TTL_MS;
    remember(this.logins, token, { secret, expiresAt, csrf: '' });
    return { token, expiresAt };
  }

  /** Opens a session for a login token, which is spent whatever the outcome; undefined: unknown or expired. */
  redeem(token: string): string | undefined {
    const entry = this.logins.get(token);
    this.logins.delete(token);
    if (!entry || entry.expiresAt <= this.now()) return undefined;
    return this.open(entry.secret);
  }

  /** Opens a session for a key the caller has already checked. */
  open(secret: string): string {
    const id = randomToken();
    remember(this.sessions, id, { secret, expiresAt: this.now() + SESSION_IDLE_MS, csrf: randomToken() });
    return id;
  }

  /** The live session of a cookie value, its idle clock restarted. */
  get(id: string | undefined): UiSession | undefined {
    if (!id) return undefined;
    const entry = this.sessions.get(id);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    entry.expiresAt = this.now() + SESSION_IDLE_MS;
    return { secret: entry.secret, csrf: entry.csrf };
  }

  close(id: string | undefined): void {
    if (id) this.sessions.delete(id);
  }
}

/** Whether a request's CSRF header is the session's token (compared in constant time). */
export function csrfMatches(session: UiSession, sent: string | undefined): boolean {
  if (!sent) return false;
  const a = Buffer.from(session.csrf);
  const b = Buffer.from(sent);
  return a.length === b.length && timingSafeEqual(a, b);
}

function randomToken(): string {
  return randomBytes(32).toString('base64url');
}

/** Adds an entry; past the cap, the oldest (first inserted) go, so a flood of logins cannot grow memory. */
function remember(map: Map<string, Entry>, key: string, entry: Entry): void {
  map.set(key, entry);
  for (const oldest of map.keys()) {
    if (map.size <= MAX_ENTRIES) break;
    map.delete(oldest);
  }
}
