/**
 * The API over TLS (docs/security.md, "Remote access"): a certificate and key the operator
 * gives, or a self-signed one the daemon makes once under <home>/tls and prints the
 * fingerprint of. Listening beyond loopback without TLS is refused unless asked for.
 */
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createHash, webcrypto, X509Certificate } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { WarrenError } from '@warren/protocol';
import { pem, serial, writeAtomic } from '../network/ca.js';
import { LOCAL_PORT_DOMAIN } from '../network/ports.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const SELF_SIGNED_DAYS = 825;

export type TlsSetting = { certFile: string; keyFile: string } | 'self-signed';

export interface ServerTls {
  cert: string;
  key: string;
  /** SHA-256 of the certificate, colon-separated hex: what a client pins or compares. */
  fingerprint: string;
  /** The certificate file: what a client trusts (WARREN_CA_FILE) when it is self-signed. */
  certFile: string;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Refuses plain HTTP beyond loopback unless `insecure`. */
export function requireSafeListen(host: string, tls: boolean, insecure: boolean): void {
  if (tls || insecure || isLoopback(host)) return;
  throw new WarrenError(
    'invalid_argument',
    `refusing to listen on ${host} without TLS: API keys would cross the network in clear text. Give --tls-cert FILE --tls-key FILE, or --tls-self-signed, or --insecure to do it anyway`,
  );
}

/**
 * The daemon's TLS. A self-signed certificate is made once and kept; it names loopback, this
 * host, the listen address and, with a port domain other than localhost, `*.<domain>` (port
 * URLs). It is made again only when it no longer covers the listen address or the domain.
 */
export async function serverTls(setting: TlsSetting | undefined, home: string, host: string, portDomain = LOCAL_PORT_DOMAIN): Promise<ServerTls | undefined> {
  if (!setting) return undefined;
  if (setting !== 'self-signed') {
    const [cert, key] = await Promise.all([readFile(setting.certFile, 'utf8'), readFile(setting.keyFile, 'utf8')]).catch((err: Error) => {
      throw new WarrenError('invalid_argument', `cannot read the TLS certificate or key: ${err.message}`);
    });
    return { cert, key, fingerprint: fingerprintOf(cert), certFile: path.resolve(setting.certFile) };
  }
  const dir = path.join(home, 'tls');
  const certFile = path.join(dir, 'self-signed.pem');
  const keyFile = path.join(dir, 'self-signed.key');
  const existing = await Promise.all([readFile(certFile, 'utf8'), readFile(keyFile, 'utf8')]).catch(() => undefined);
  // Made once and kept, so clients that trust it keep trusting it across restarts.
  const wildcard = portDomain === LOCAL_PORT_DOMAIN ? undefined : `*.${portDomain}`;
  const covered = (pem: string) => coversHost(pem, host) && (!wildcard || coversHost(pem, `0-sb-0.${portDomain}`));
  if (existing && covered(existing[0])) return { cert: existing[0], key: existing[1], fingerprint: fingerprintOf(existing[0]), certFile };
  const { cert, key } = await selfSigned(host, wildcard);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeAtomic(keyFile, key);
  await writeAtomic(certFile, cert);
  return { cert, key, fingerprint: fingerprintOf(cert), certFile };
}

function fingerprintOf(certPem: string): string {
  const der = new X509Certificate(certPem).raw;
  return createHash('sha256').update(der).digest('hex').toUpperCase().match(/../g)?.join(':') ?? '';
}

/** Names the certificate is for: loopback, this host's name, the listen address and port URLs' wildcard. */
function names(host: string, wildcard: string | undefined): Array<{ type: 'dns' | 'ip'; value: string }> {
  const all = new Set(['localhost', '127.0.0.1', '::1', os.hostname()]);
  if (host && host !== '0.0.0.0' && host !== '::') all.add(host);
  if (wildcard) all.add(wildcard);
  return [...all].map((value) => ({ type: isIP(value) ? 'ip' : 'dns', value }));
}

function coversHost(certPem: string, host: string): boolean {
  if (!host || host === '0.0.0.0' || host === '::') return true;
  const cert = new X509Certificate(certPem);
  return (isIP(host) ? cert.checkIP(host) : cert.checkHost(host)) !== undefined;
}

async function selfSigned(host: string, wildcard: string | undefined): Promise<{ cert: string; key: string }> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=warren daemon on ${os.hostname()}, O=warren`,
    notBefore: new Date(now - 3600_000),
    notAfter: new Date(now + SELF_SIGNED_DAYS * 86_400_000),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      // Its own issuer: clients trust it as a CA file (WARREN_CA_FILE).
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyCertSign, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
      new x509.SubjectAlternativeNameExtension(names(host, wildcard), false),
    ],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { cert: `${cert.toString('pem').trimEnd()}\n`, key: pem('PRIVATE KEY', Buffer.from(pkcs8)) };
}
