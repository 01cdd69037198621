/** HTTP header names shared by the egress proxy, credential rules and port forwarding. */

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
