/**
 * Who an envd call acts for. The sandbox comes from `E2b-Sandbox-Id` (checked against the
 * access token by the router before any service runs); the user from envd's
 * `Authorization: Basic base64(user:)`, `user` when absent, as in E2B's templates.
 */
import path from 'node:path/posix';
import type { HandlerContext } from '@connectrpc/connect';
import type { Logger } from 'pino';
import { WarrenError } from '@warren/protocol';
import { toConnectError } from '../errors.js';

const E2B_DEFAULT_USER = 'user';
export const SANDBOX_ID_HEADER = 'e2b-sandbox-id';
const USER_NAME = /^[a-z_][a-z0-9_-]{0,31}$/;

export interface EnvdCall {
  sandboxId: string;
  user: string;
  /** The user's home: where relative paths and commands without a cwd start. */
  home: string;
}

export function userHome(user: string): string {
  return user === 'root' ? '/root' : `/home/${user}`;
}

/**
 * The user named by a Basic authorization header (the password part is unused, as in envd).
 * One named is checked, an empty one included (E2B's SDKs send no header rather than an empty
 * name): it must never reach a command or a file call as anything but a valid name.
 */
function userOf(authorization: string | null | undefined, fallback = E2B_DEFAULT_USER): string {
  if (!authorization?.toLowerCase().startsWith('basic ')) return fallback;
  const decoded = Buffer.from(authorization.slice(6).trim(), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return checkedUser(colon < 0 ? decoded : decoded.slice(0, colon));
}

export function checkedUser(user: string): string {
  if (!USER_NAME.test(user))
    throw new WarrenError(
      'invalid_argument',
      `user ${JSON.stringify(user.slice(0, 40))}${user.length > 40 ? '...' : ''} is not a valid user name (a lower-case letter or _, then letters, digits, _ or -, at most 32)`,
    );
  return user;
}

export function callOf(headers: Headers): EnvdCall {
  const sandboxId = headers.get(SANDBOX_ID_HEADER);
  if (!sandboxId) throw new WarrenError('invalid_argument', 'missing E2b-Sandbox-Id header');
  const user = userOf(headers.get('authorization'));
  return { sandboxId, user, home: userHome(user) };
}

/** A path as envd reads it: relative to the user's home, `~` for the home itself. */
export function resolvePath(call: EnvdCall, p: string): string {
  if (!p) throw new WarrenError('invalid_argument', 'path must not be empty');
  if (p === '~' || p.startsWith('~/')) return path.join(call.home, p.slice(1));
  return path.isAbsolute(p) ? path.normalize(p) : path.join(call.home, p);
}

/**
 * The call of a streaming RPC, before anything runs; a bad one (an invalid user) is answered
 * as a Connect error with its code. Thrown as is from a stream handler, it would be
 * `internal`: Connect converts only ConnectErrors.
 */
export function streamCallOf(ctx: HandlerContext, log: Logger, what: string): EnvdCall {
  try {
    return callOf(ctx.requestHeader);
  } catch (err) {
    throw toConnectError(err, log, what);
  }
}

/** A unary RPC's handler from `fn`: the call's identity in, warren's errors out as Connect's. */
export function unaryHandler(log: Logger) {
  return <Req, Res>(what: string, fn: (call: EnvdCall, req: Req) => Promise<Res>) =>
    async (req: Req, ctx: HandlerContext): Promise<Res> => {
      try {
        return await fn(callOf(ctx.requestHeader), req);
      } catch (err) {
        throw toConnectError(err, log, what);
      }
    };
}
