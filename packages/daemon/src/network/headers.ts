/** HTTP header names and helpers shared by the egress proxy, credential rules and port forwarding. */

/** Hop-by-hop headers (RFC 9110 7.6.1, plus the proxy ones): they concern one connection and are never passed on. */
export const HOP_BY_HOP_HEADERS: readonly string[] = [
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-authenticate',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];

/** node's rawHeaders (name, value, name, value, ...) as [name, value] pairs, in order and as sent. */
export function* rawHeaderPairs(rawHeaders: string[]): Generator<[name: string, value: string]> {
  let name: string | undefined;
  for (const item of rawHeaders) {
    if (name === undefined) {
      name = item;
    } else {
      yield [name, item];
      name = undefined;
    }
  }
}
