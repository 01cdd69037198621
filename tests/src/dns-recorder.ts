/**
 * A tiny DNS server on 127.0.0.1 for tests: answers A queries for the names it is given,
 * NXDOMAIN for any other name, no records for other types, and records every name it was
 * asked about. A daemon started with WARREN_EGRESS_DNS_SERVER pointing here resolves egress
 * names only through it, so a test can prove which names the daemon looked up.
 */
import dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';

export interface DnsRecorder {
  /** `127.0.0.1:PORT`, for WARREN_EGRESS_DNS_SERVER. */
  server: string;
  /** Every query so far, lower-cased names, in arrival order. */
  queries: Array<{ name: string; type: number }>;
  asked(name: string): boolean;
  close(): Promise<void>;
}

const TYPE_A = 1;

export async function startDnsRecorder(answers: Record<string, string>): Promise<DnsRecorder> {
  const socket = dgram.createSocket('udp4');
  const queries: DnsRecorder['queries'] = [];
  socket.on('message', (msg, peer) => {
    const q = parseQuestion(msg);
    if (!q) return; // not a query we understand: no answer, as a real server might
    const name = q.name.toLowerCase();
    queries.push({ name, type: q.type });
    const address = answers[name];
    socket.send(answer(msg, q.end, address === undefined ? 'nxdomain' : q.type === TYPE_A ? address : undefined), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address() as AddressInfo;
  return {
    server: `127.0.0.1:${port}`,
    queries,
    asked: (name) => queries.some((q) => q.name === name.toLowerCase()),
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

/** The first question of a query: its name, type and where it ends. */
function parseQuestion(msg: Buffer): { name: string; type: number; end: number } | undefined {
  if (msg.length < 12 || msg.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let at = 12;
  while (at < msg.length) {
    const len = msg.readUInt8(at);
    if (len === 0) break;
    if (len > 63 || at + 1 + len > msg.length) return undefined; // compression is not used in questions
    labels.push(msg.toString('latin1', at + 1, at + 1 + len));
    at += 1 + len;
  }
  if (at + 5 > msg.length) return undefined;
  return { name: labels.join('.'), type: msg.readUInt16BE(at + 1), end: at + 5 };
}

/** A response to `query` echoing its question: NXDOMAIN, one A record, or no records. */
function answer(query: Buffer, questionEnd: number, result: 'nxdomain' | string | undefined): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  const rd = query.readUInt8(2) & 0x01;
  header[2] = 0x84 | rd; // response, authoritative, recursion desired as asked
  header[3] = 0x80 | (result === 'nxdomain' ? 3 : 0); // recursion available; rcode
  header.writeUInt16BE(1, 4);
  const records = result !== undefined && result !== 'nxdomain' ? 1 : 0;
  header.writeUInt16BE(records, 6);
  const question = query.subarray(12, questionEnd);
  if (!records) return Buffer.concat([header, question]);
  const rr = Buffer.alloc(16);
  rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
  rr.writeUInt16BE(TYPE_A, 2);
  rr.writeUInt16BE(1, 4); // class IN
  rr.writeUInt32BE(5, 6); // ttl
  rr.writeUInt16BE(4, 10);
  for (const [i, b] of (result as string).split('.').entries()) rr[12 + i] = Number(b);
  return Buffer.concat([header, question, rr]);
}
