/**
 * What the egress proxy trusts when it connects to a credential host over TLS (the only
 * upstream TLS it speaks itself; other HTTPS is tunnelled and verified by the client): the
 * host's system CA bundle, as curl and git on the host would, plus an optional PEM file from
 * the daemon's configuration (WARREN_EGRESS_UPSTREAM_CA) for private servers and tests.
 */
import { readFileSync } from 'node:fs';
import tls from 'node:tls';
import { WarrenError } from '@warren/protocol';

/** Debian/Ubuntu, then Fedora/RHEL, then Alpine/others. */
const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'];

export function upstreamTrust(extraCaFile?: string): string[] {
  const system = systemBundle();
  const cas = system === undefined ? [...tls.rootCertificates] : [system];
  if (extraCaFile !== undefined) {
    let extra: string;
    try {
      extra = readFileSync(extraCaFile, 'utf8');
    } catch (err) {
      throw new WarrenError(
        'invalid_argument',
        `WARREN_EGRESS_UPSTREAM_CA: cannot read ${extraCaFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      );
    }
    if (!extra.includes('-----BEGIN CERTIFICATE-----'))
      throw new WarrenError('invalid_argument', `WARREN_EGRESS_UPSTREAM_CA: ${extraCaFile} holds no PEM certificate`);
    cas.push(extra);
  }
  return cas;
}

/** The host's CA bundle, or undefined (then node's built-in Mozilla list is used). */
function systemBundle(): string | undefined {
  for (const file of SYSTEM_BUNDLES) {
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return undefined;
}
