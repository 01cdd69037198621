/**
 * Per-sandbox certificate authorities for credential brokering. A sandbox whose policy has a
 * credential rule trusts its own CA (installed inside by core/egress-trust.ts); the egress
 * proxy terminates TLS for the credential hosts only, with a leaf certificate this CA issues
 * on the fly. The CA's private key never leaves the daemon: it lives in
 * <home>/egress-ca/<sandbox>/ (mode 0600), so it survives daemon restarts and hibernation,
 * and is deleted with the sandbox.
 *
 * Each sandbox gets its own CA (forks included): a certificate one sandbox's CA issued is
 * worth nothing in any other sandbox. The CA is constrained to issuing leaves only
 * (pathLength 0) and lives about a year; leaves live a week and are re-issued after a day.
 * EC P-256 keeps generation to milliseconds.
 */
// @peculiar/x509 resolves its dependencies through tsyringe, which needs the Reflect
// metadata API; it must be loaded first (ES modules evaluate imports in order).
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { webcrypto, randomBytes, createPrivateKey } from 'node:crypto';
import { mkdir, readFile, rm, writeFile, rename } from 'node:fs/promises';
import { isIP } from 'node:net';
import path from 'node:path';
import tls from 'node:tls';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 3600 * 1000;
const CA_LIFETIME_MS = 400 * DAY_MS;
const LEAF_LIFETIME_MS = 7 * DAY_MS;
const LEAF_REISSUE_AFTER_MS = DAY_MS;
/** Clocks inside restored sandboxes and on the host may differ a little. */
const BACKDATE_MS = 3600 * 1000;
/** Leaves kept per sandbox (one per credential host in practice). */
const MAX_LEAVES_PER_SANDBOX = 128;

interface LoadedCa {
  cert: x509.X509Certificate;
  certPem: string;
  key: CryptoKey;
  leaves: Map<string, { context: tls.SecureContext; issuedAt: number }>;
}

export class SandboxCaStore {
  private loaded = new Map<string, Promise<LoadedCa>>();

  constructor(private readonly dir: string) {}

  /**
   * The sandbox's CA certificate (PEM), created on first use. Concurrent callers share one
   * creation.
   */
  async ensure(sandboxId: string): Promise<string> {
    return (await this.load(sandboxId, true)).certPem;
  }

  /** Whether the sandbox has a CA (on disk or loaded). */
  async has(sandboxId: string): Promise<boolean> {
    if (this.loaded.has(sandboxId)) return true;
    return readFile(this.certFile(sandboxId)).then(
      () => true,
      () => false,
    );
  }

  /**
   * A TLS context presenting a certificate for `host` (a name or an IP literal) issued by
   * the sandbox's CA. Cached; throws if the sandbox has no CA.
   */
  async contextFor(sandboxId: string, host: string): Promise<tls.SecureContext> {
    const ca = await this.load(sandboxId, false);
    const key = host.toLowerCase();
    const cached = ca.leaves.get(key);
    if (cached && Date.now() - cached.issuedAt < LEAF_REISSUE_AFTER_MS) return cached.context;
    const context = await issueLeaf(ca, key);
    if (ca.leaves.size >= MAX_LEAVES_PER_SANDBOX) ca.leaves.delete(ca.leaves.keys().next().value!);
    ca.leaves.set(key, { context, issuedAt: Date.now() });
    return context;
  }

  /** Deletes the sandbox's CA (the sandbox is gone). */
  async remove(sandboxId: string): Promise<void> {
    this.loaded.delete(sandboxId);
    await rm(path.join(this.dir, sandboxId), { recursive: true, force: true });
  }

  private certFile(id: string): string {
    return path.join(this.dir, id, 'ca.pem');
  }

  private keyFile(id: string): string {
    return path.join(this.dir, id, 'ca.key');
  }

  private load(id: string, create: boolean): Promise<LoadedCa> {
    if (!/^[a-z0-9-]+$/.test(id)) throw new TypeError(`SandboxCaStore: '${id}' is not a sandbox id`);
    let p = this.loaded.get(id);
    if (!p) {
      p = this.read(id).then(async (ca) => ca ?? (create ? this.create(id) : Promise.reject(new Error(`sandbox ${id} has no egress CA`))));
      this.loaded.set(id, p);
      // A failed load is not cached: the next call tries again.
      p.catch(() => {
        if (this.loaded.get(id) === p) this.loaded.delete(id);
      });
    }
    return p;
  }

  private async read(id: string): Promise<LoadedCa | undefined> {
    let certPem: string;
    let keyPem: string;
    try {
      [certPem, keyPem] = await Promise.all([readFile(this.certFile(id), 'utf8'), readFile(this.keyFile(id), 'utf8')]);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    const pkcs8 = createPrivateKey(keyPem).export({ format: 'der', type: 'pkcs8' });
    const key = await webcrypto.subtle.importKey('pkcs8', pkcs8, ALG, false, ['sign']);
    return { cert: new x509.X509Certificate(certPem), certPem, key: key as CryptoKey, leaves: new Map() };
  }

  private async create(id: string): Promise<LoadedCa> {
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
    const now = Date.now();
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: serial(),
      name: `CN=warren egress CA for ${id}, O=warren`,
      notBefore: new Date(now - BACKDATE_MS),
      notAfter: new Date(now + CA_LIFETIME_MS),
      keys,
      signingAlgorithm: ALG,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    // Ends with a newline: the sandbox appends it to bundles, where a joined line breaks PEM.
    const certPem = `${cert.toString('pem').trimEnd()}\n`;
    const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
    const keyPem = pem('PRIVATE KEY', Buffer.from(pkcs8));
    const dir = path.join(this.dir, id);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // Key first, certificate last: read() treats a directory without ca.pem as no CA.
    await writeAtomic(this.keyFile(id), keyPem);
    await writeAtomic(this.certFile(id), certPem);
    return { cert, certPem, key: keys.privateKey, leaves: new Map() };
  }
}

async function issueLeaf(ca: LoadedCa, host: string): Promise<tls.SecureContext> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const san = isIP(host) ? { type: 'ip' as const, value: host } : { type: 'dns' as const, value: host };
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${isIP(host) ? 'warren egress' : host}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - BACKDATE_MS),
    notAfter: new Date(Math.min(now + LEAF_LIFETIME_MS, ca.cert.notAfter.getTime())),
    publicKey: keys.publicKey,
    signingKey: ca.key,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
      new x509.SubjectAlternativeNameExtension([san], false),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert, false),
    ],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return tls.createSecureContext({
    key: pem('PRIVATE KEY', Buffer.from(pkcs8)),
    // The chain: clients trust the CA, but some want it sent along.
    cert: `${cert.toString('pem')}\n${ca.certPem}`,
  });
}

/** A positive 128-bit serial (the high bit clear so DER keeps it positive). */
export function serial(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes.readUInt8(0) & 0x7f;
  return bytes.toString('hex');
}

export function pem(label: string, der: Buffer): string {
  const b64 = der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

export async function writeAtomic(file: string, text: string): Promise<void> {
  const tmp = `${file}.tmp`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, file);
}
