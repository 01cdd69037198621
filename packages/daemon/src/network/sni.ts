/**
 * Reads the server name (SNI) from the first bytes a client sends on a CONNECT tunnel, so the
 * egress proxy can check that a TLS connection asks for the host the CONNECT named (no domain
 * fronting: CONNECT allowed.example, then SNI evil.example to a shared front end).
 *
 * Every length is checked against the bytes actually present: the input comes from code the
 * sandbox controls. The parser is strict where strictness closes a gap: a server and this
 * parser must never disagree about the name, so duplicate server_name extensions, several
 * host names, or lengths that do not add up are "malformed" (the proxy refuses those), not
 * "no SNI".
 */

const RECORD_HEADER_BYTES = 5;
const CONTENT_TYPE_HANDSHAKE = 22;
const HANDSHAKE_CLIENT_HELLO = 1;
const EXTENSION_SERVER_NAME = 0;
/**
 * Extensions that carry an encrypted server name: an inner ClientHello the front end decrypts
 * and routes by, which this parser cannot read. The SNI it sees is then only the front's
 * name, so the check that SNI names the CONNECT host proves nothing.
 */
const ENCRYPTED_NAME_EXTENSIONS = new Map<number, string>([
  [0xfe0d, 'Encrypted Client Hello (extension 0xfe0d)'],
  // The drafts' codepoints (draft-ietf-tls-esni 8 to 12), still spoken by some servers.
  ...[0xfe08, 0xfe09, 0xfe0a, 0xfe0b, 0xfe0c].map((t): [number, string] => [t, `Encrypted Client Hello, a draft (extension 0x${t.toString(16)})`]),
  [0xffce, 'encrypted SNI, the ECH draft before it (extension 0xffce)'],
]);
const NAME_TYPE_HOST_NAME = 0;
/** TLS caps a plaintext record at 2^14 bytes. */
const MAX_RECORD_BYTES = 16384;
/**
 * Largest ClientHello we wait for. Real ones are a few hundred bytes to ~2 KiB (post-quantum
 * key shares); anything past this is not worth buffering on the sandbox's behalf.
 */
const MAX_CLIENT_HELLO_BYTES = 64 * 1024;
/** Bytes a caller may need to buffer before scanClientHello gives a final answer. */
export const MAX_CLIENT_HELLO_BUFFER = MAX_CLIENT_HELLO_BYTES + 4 + Math.ceil((MAX_CLIENT_HELLO_BYTES + 4) / MAX_RECORD_BYTES + 1) * RECORD_HEADER_BYTES;

export type ClientHelloScan =
  /** More bytes are needed to decide. */
  | { kind: 'incomplete' }
  /** The first byte is not a TLS handshake record: some other protocol. */
  | { kind: 'not-tls' }
  /** Starts like TLS but does not parse as a ClientHello. */
  | { kind: 'malformed'; reason: string }
  /**
   * A complete ClientHello; serverName is absent when the client sent no SNI, encryptedName
   * names the extension when it also carries an encrypted one (ECH), which may differ.
   */
  | { kind: 'client-hello'; serverName?: string; encryptedName?: string };

class Malformed extends Error {}

/** Bounds-checked reader over one buffer; every read throws Malformed past the end. */
class Reader {
  private pos = 0;
  constructor(private buf: Buffer) {}

  get remaining(): number {
    return this.buf.length - this.pos;
  }

  u8(what: string): number {
    this.need(1, what);
    return this.buf.readUInt8(this.pos++);
  }

  u16(what: string): number {
    this.need(2, what);
    const v = this.buf.readUInt16BE(this.pos);
    this.pos += 2;
    return v;
  }

  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  private need(n: number, what: string): void {
    if (n > this.remaining) throw new Malformed(`${what} runs past its enclosing length`);
  }
}

/**
 * Decides what the first bytes of a tunnel are. Call again with more bytes while the answer
 * is "incomplete"; the handshake message may span several TLS records.
 */
export function scanClientHello(data: Buffer): ClientHelloScan {
  if (data.length === 0) return { kind: 'incomplete' };
  if (data[0] !== CONTENT_TYPE_HANDSHAKE) return { kind: 'not-tls' };
  try {
    const handshake = reassembleHandshake(data);
    if (!handshake) return { kind: 'incomplete' };
    return { kind: 'client-hello', ...namesOf(handshake) };
  } catch (err) {
    if (err instanceof Malformed) return { kind: 'malformed', reason: err.message };
    throw err;
  }
}

/** The SNI of a complete ClientHello, or undefined (no SNI, incomplete, not TLS or malformed). */
export function parseSni(data: Buffer): string | undefined {
  const scan = scanClientHello(data);
  return scan.kind === 'client-hello' ? scan.serverName : undefined;
}

/**
 * Concatenates the payloads of the leading handshake records until they hold the whole first
 * handshake message; returns that message's body, or undefined if more bytes are needed.
 */
function reassembleHandshake(data: Buffer): Buffer | undefined {
  const fragments: Buffer[] = [];
  let collected = 0;
  let offset = 0;
  let messageLength: number | undefined;
  while (true) {
    if (data.length - offset < RECORD_HEADER_BYTES) return undefined;
    const type = data[offset];
    const major = data[offset + 1];
    const length = data.readUInt16BE(offset + 3);
    if (type !== CONTENT_TYPE_HANDSHAKE) throw new Malformed(`record type ${type} before the ClientHello was complete`);
    if (major !== 3) throw new Malformed(`record version ${major}.${data[offset + 2]} is not TLS`);
    if (length === 0 || length > MAX_RECORD_BYTES) throw new Malformed(`record length ${length} is out of range`);
    offset += RECORD_HEADER_BYTES;
    if (data.length - offset < length) return undefined;
    fragments.push(data.subarray(offset, offset + length));
    collected += length;
    offset += length;

    if (messageLength === undefined && collected >= 4) {
      const head = Buffer.concat(fragments);
      if (head[0] !== HANDSHAKE_CLIENT_HELLO) throw new Malformed(`handshake type ${head[0]} is not a ClientHello`);
      messageLength = head.readUIntBE(1, 3);
      if (messageLength > MAX_CLIENT_HELLO_BYTES) throw new Malformed(`ClientHello of ${messageLength} bytes is too large`);
    }
    if (messageLength !== undefined && collected >= 4 + messageLength) {
      return Buffer.concat(fragments).subarray(4, 4 + messageLength);
    }
  }
}

function namesOf(hello: Buffer): { serverName?: string; encryptedName?: string } {
  const r = new Reader(hello);
  r.bytes(2, 'client_version');
  r.bytes(32, 'random');
  const sessionIdLength = r.u8('session_id length');
  if (sessionIdLength > 32) throw new Malformed(`session_id of ${sessionIdLength} bytes`);
  r.bytes(sessionIdLength, 'session_id');
  const cipherSuitesLength = r.u16('cipher_suites length');
  if (cipherSuitesLength === 0 || cipherSuitesLength % 2 !== 0) throw new Malformed(`cipher_suites length ${cipherSuitesLength}`);
  r.bytes(cipherSuitesLength, 'cipher_suites');
  const compressionLength = r.u8('compression_methods length');
  if (compressionLength === 0) throw new Malformed('no compression methods');
  r.bytes(compressionLength, 'compression_methods');
  // Extensions are optional in the grammar (a bare TLS 1.0 hello has none): then no SNI.
  if (r.remaining === 0) return { serverName: undefined };
  const extensions = new Reader(r.bytes(r.u16('extensions length'), 'extensions'));
  if (r.remaining !== 0) throw new Malformed('bytes after the extensions');

  let serverName: string | undefined;
  let encryptedName: string | undefined;
  const types = new Set<number>();
  while (extensions.remaining > 0) {
    const type = extensions.u16('extension type');
    const body = extensions.bytes(extensions.u16('extension length'), 'extension');
    if (types.has(type)) throw new Malformed(`extension ${type} appears twice`);
    types.add(type);
    if (type === EXTENSION_SERVER_NAME) serverName = hostNameOf(body);
    encryptedName ??= ENCRYPTED_NAME_EXTENSIONS.get(type);
  }
  return { serverName, ...(encryptedName === undefined ? {} : { encryptedName }) };
}

function hostNameOf(extension: Buffer): string | undefined {
  const outer = new Reader(extension);
  const list = new Reader(outer.bytes(outer.u16('server_name_list length'), 'server_name_list'));
  if (outer.remaining !== 0) throw new Malformed('bytes after the server_name_list');
  let hostName: string | undefined;
  while (list.remaining > 0) {
    const nameType = list.u8('name_type');
    const name = list.bytes(list.u16('server name length'), 'server name');
    if (nameType !== NAME_TYPE_HOST_NAME) continue;
    if (hostName !== undefined) throw new Malformed('more than one host_name in server_name');
    if (name.length === 0) throw new Malformed('empty host_name');
    // RFC 6066: a host name is ASCII. Anything else could be read differently by the server.
    for (const byte of name) if (byte <= 0x20 || byte >= 0x7f) throw new Malformed('host_name is not printable ASCII');
    hostName = name.toString('latin1');
  }
  return hostName;
}
