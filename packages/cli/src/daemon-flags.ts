/** `warren daemon`'s flags as the daemon's configuration (docs/cli.md). */
import type { DaemonConfig } from '@warren/daemon';

export interface DaemonFlags {
  port?: number;
  home?: string;
  listen?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsSelfSigned?: boolean;
  insecure?: boolean;
}

/** `HOST`, `HOST:PORT` or `[V6]:PORT`. */
export function parseListen(value: string): { host: string; port?: number } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(value) ?? /^([^:]+)(?::(\d+))?$/.exec(value) ?? /^([0-9a-fA-F:]+)$/.exec(value);
  if (!m?.[1]) throw new Error(`--listen takes HOST, HOST:PORT or [IPv6]:PORT (got '${value}')`);
  const port = m[2] === undefined ? undefined : Number(m[2]);
  if (port !== undefined && port > 65535) throw new Error(`--listen port must be 0-65535 (got ${port})`);
  return { host: m[1], ...(port !== undefined ? { port } : {}) };
}

export function daemonOverrides(f: DaemonFlags): Partial<DaemonConfig> {
  if ((f.tlsCert === undefined) !== (f.tlsKey === undefined)) throw new Error('--tls-cert and --tls-key go together');
  if (f.tlsCert && f.tlsSelfSigned) throw new Error('give either --tls-cert/--tls-key or --tls-self-signed, not both');
  const listen = f.listen ? parseListen(f.listen) : undefined;
  const port = listen?.port ?? f.port;
  return {
    ...(f.home ? { home: f.home } : {}),
    ...(listen ? { host: listen.host } : {}),
    ...(port !== undefined ? { port } : {}),
    ...(f.tlsCert && f.tlsKey ? { tls: { certFile: f.tlsCert, keyFile: f.tlsKey } } : f.tlsSelfSigned ? { tls: 'self-signed' as const } : {}),
    ...(f.insecure ? { insecure: true } : {}),
  };
}
