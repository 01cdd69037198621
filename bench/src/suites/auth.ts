/**
 * Authorization at scale (issue 16): a daemon home seeded with `--n keys=1000` API keys and
 * `--n records=10000` hibernated sandboxes, each key owning records / keys of them. Measured
 * through the real API on that daemon:
 * - what scopes and ownership add per request: `GET /v1/sandboxes/:id` with the owner's key
 *   (key lookup, the route's rule, the sandbox's owner) against the same call with the admin
 *   key (key lookup and rule, no ownership read), and `GET /v1/health` (authentication only);
 * - a list filtered by owner: `GET /v1/sandboxes` with a key that owns 10 of the 10,000,
 *   against the admin key's first page.
 * Targets: ownership adds at most 0.2 ms p50; the owner's list p50 at most 20 ms.
 */
import { createHash, randomBytes } from 'node:crypto';
import { DEFAULT_SCOPES } from '@warren/protocol';
import { KeyStore, layout, Registry } from '@warren/daemon';
import { HttpClient } from '@warren/sdk';
import type { Context } from '../context.js';
import { fmt, percentile } from '../stats.js';
import { seed, startOwnDaemon, timeCalls } from './density.js';

const SUITE = 'auth';
const CALLS = 400;

export async function runAuth(ctx: Context): Promise<void> {
  const records = ctx.iters.records;
  const keyCount = ctx.iters.keys;
  const r = ctx.report;
  const secrets: string[] = [];
  const keyId = (i: number) => `key-bench${String(i).padStart(5, '0')}`;
  const prepare = async (home: string) => {
    await seed(home, records, (i) => keyId(i % keyCount));
    const reg = new Registry(layout(home).db);
    try {
      const store = new KeyStore(reg.database);
      const put = reg.database.transaction(() => {
        for (let i = 0; i < keyCount; i++) {
          const secret = `wk_${randomBytes(24).toString('base64url')}`;
          secrets.push(secret);
          store.put({
            id: keyId(i),
            hash: createHash('sha256').update(secret).digest('hex'),
            name: `bench ${i}`,
            scopes: [...DEFAULT_SCOPES],
            createdAt: Date.now(),
          });
        }
      });
      put();
    } finally {
      reg.close();
    }
  };
  const own = await startOwnDaemon(ctx, `daemon with ${keyCount} keys and ${records} hibernated records`, prepare);
  try {
    const d = own.d;
    const owner = new HttpClient({ url: d.url, apiKey: secrets[7]! });
    const admin = d.http;
    // Key 7 owns records 7, 7 + keys, 7 + 2 * keys, ...
    const mine = `sb-seed${String(7).padStart(6, '0')}`;
    const calls: Array<[string, string, HttpClient, string, string?]> = [
      ['auth-health', 'GET /v1/health (authentication only)', owner, '/v1/health'],
      ['auth-get-admin', 'GET /v1/sandboxes/:id, admin key (no ownership read)', admin, `/v1/sandboxes/${mine}`],
      ['auth-get-owner', "GET /v1/sandboxes/:id, its owner's key", owner, `/v1/sandboxes/${mine}`, 'auth-get-admin'],
      ['auth-list-admin', 'GET /v1/sandboxes (first page of 100), admin key', admin, '/v1/sandboxes'],
      ['auth-list-owner', `GET /v1/sandboxes, a key owning ${Math.round(records / keyCount)} of ${records}`, owner, '/v1/sandboxes', 'auth-list-admin'],
    ];
    for (const [, , client, route] of calls) await client.json('GET', route); // warm connections and statements
    const owned = await owner.json<{ sandboxes: unknown[] }>('GET', '/v1/sandboxes');
    if (owned.sandboxes.length !== Math.round(records / keyCount))
      throw new Error(`the owner's list holds ${owned.sandboxes.length} sandboxes, not ${Math.round(records / keyCount)}`);
    for (const [key, label, client, route, baseline] of calls) {
      const values = await timeCalls(CALLS, () => client.json('GET', route));
      r.add({ key, suite: SUITE, label, unit: 'ms', values, ...(baseline ? { baseline } : { isBaseline: true }) });
    }
    const added = r.p50('auth-get-owner') - r.p50('auth-get-admin');
    r.target(
      'scopes and ownership add ≤ 0.2 ms p50 per request',
      added <= 0.2,
      `+${fmt(added)} ms (owner ${fmt(r.p50('auth-get-owner'))}, admin ${fmt(r.p50('auth-get-admin'))})`,
    );
    const list = r.p50('auth-list-owner');
    r.target(
      `list filtered by owner at ${records} records p50 ≤ 20 ms`,
      list <= 20,
      `p50 ${fmt(list)} ms, p99 ${fmt(percentile(r.get('auth-list-owner')?.values ?? [], 99))} ms`,
    );
  } finally {
    await own.stop();
  }
}
