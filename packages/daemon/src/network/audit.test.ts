import { test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { EgressLog, type EgressRecord } from './audit.js';

function attempt(sandboxId: string, time: number, extra: Partial<EgressRecord> = {}): EgressRecord {
  return { time, sandboxId, host: 'example.com', port: 443, method: 'CONNECT', bytesUp: 0, bytesDown: 0, decision: 'allowed', ...extra };
}

test('records attempts, fills in bytes when they finish, lists them oldest first', () => {
  const db = new Database(':memory:');
  try {
    const log = new EgressLog(db);
    const first = log.record(attempt('sb-a', 1000));
    const denied = log.record(
      attempt('sb-a', 1001, { host: 'evil.net', port: 80, method: 'GET', path: '/x?y=1', decision: 'denied', reason: 'no rule allows evil.net:80' }),
    );
    log.record(attempt('sb-b', 1002));
    assert.ok(denied > first);

    log.finish(first, 512, 4096);
    log.finish(denied, 0, 0, 'closed by client');
    assert.deepEqual(log.list('sb-a'), [
      { id: first, time: 1000, sandboxId: 'sb-a', host: 'example.com', port: 443, method: 'CONNECT', bytesUp: 512, bytesDown: 4096, decision: 'allowed' },
      {
        id: denied,
        time: 1001,
        sandboxId: 'sb-a',
        host: 'evil.net',
        port: 80,
        method: 'GET',
        path: '/x?y=1',
        bytesUp: 0,
        bytesDown: 0,
        decision: 'denied',
        reason: 'closed by client',
      },
    ]);
    // finish without a reason keeps the one recorded.
    log.finish(denied, 1, 2);
    assert.equal(log.list('sb-a')[1]?.reason, 'closed by client');
    // Optional fields stay absent rather than null.
    const noMethod = log.record({ time: 1003, sandboxId: 'sb-c', host: '10.0.0.1', port: 22, bytesUp: 0, bytesDown: 0, decision: 'denied' });
    assert.deepEqual(log.list('sb-c'), [
      { id: noMethod, time: 1003, sandboxId: 'sb-c', host: '10.0.0.1', port: 22, bytesUp: 0, bytesDown: 0, decision: 'denied' },
    ]);
    assert.deepEqual(log.list('sb-none'), []);
    assert.throws(() => log.finish(first, -1, 0), RangeError);
    assert.throws(() => log.record(attempt('sb-a', 1.5)), RangeError);
  } finally {
    db.close();
  }
});

test('pages by id: afterId and limit, default 100, at most 1000', () => {
  const db = new Database(':memory:');
  try {
    const log = new EgressLog(db);
    const ids: number[] = [];
    for (let i = 0; i < 1100; i++) {
      ids.push(log.record(attempt('sb-a', 10_000 + i)));
      if (i % 10 === 0) log.record(attempt('sb-other', 10_000 + i));
    }
    assert.deepEqual(
      log.list('sb-a').map((e) => e.id),
      ids.slice(0, 100),
    );
    assert.deepEqual(
      log.list('sb-a', { limit: 3 }).map((e) => e.id),
      ids.slice(0, 3),
    );
    assert.deepEqual(
      log.list('sb-a', { afterId: ids[2], limit: 3 }).map((e) => e.id),
      ids.slice(3, 6),
    );
    assert.equal(log.list('sb-a', { limit: 5000 }).length, 1000);
    assert.equal(log.list('sb-a', { limit: 0 }).length, 1);
    assert.deepEqual(log.list('sb-a', { afterId: ids[1099] }), []);
    // Walking the pages visits every record once, in order.
    const seen: number[] = [];
    for (let after = 0; ; ) {
      const page = log.list('sb-a', { afterId: after, limit: 250 });
      const last = page.at(-1);
      if (!last) break;
      seen.push(...page.map((e) => e.id));
      after = last.id;
    }
    assert.deepEqual(seen, ids);
  } finally {
    db.close();
  }
});

test('prune removes records older than the cutoff; ids are never reused', () => {
  const db = new Database(':memory:');
  try {
    const log = new EgressLog(db);
    const old = log.record(attempt('sb-a', 1000));
    log.record(attempt('sb-b', 1500));
    const kept = log.record(attempt('sb-a', 2000));
    assert.equal(log.prune(2000), 2);
    assert.deepEqual(
      log.list('sb-a').map((e) => e.id),
      [kept],
    );
    assert.equal(log.list('sb-b').length, 0);
    assert.equal(log.prune(2000), 0);
    // Even after the table is emptied, a follower that saw `kept` still sees what comes next.
    assert.equal(log.prune(Number.MAX_SAFE_INTEGER), 1);
    const next = log.record(attempt('sb-a', 3000));
    assert.ok(next > kept && kept > old);
    assert.deepEqual(
      log.list('sb-a', { afterId: kept }).map((e) => e.id),
      [next],
    );
  } finally {
    db.close();
  }
});

test('host, path and other client strings are capped at 2048 characters', () => {
  const db = new Database(':memory:');
  try {
    const log = new EgressLog(db);
    log.record(attempt('sb-a', 1, { host: 'h'.repeat(5000), path: `/${'p'.repeat(5000)}`, method: 'M'.repeat(3000) }));
    // A cut that would split a surrogate pair drops the lone half.
    log.record(attempt('sb-a', 2, { path: `${'p'.repeat(2047)}😀tail` }));
    const [long, emoji] = log.list('sb-a');
    assert.ok(long && emoji);
    assert.equal(long.host.length, 2048);
    assert.equal(long.path?.length, 2048);
    assert.equal(long.method?.length, 2048);
    assert.equal(emoji.path, 'p'.repeat(2047));
  } finally {
    db.close();
  }
});

test('the table survives a second EgressLog on the same database', () => {
  const db = new Database(':memory:');
  try {
    const first = new EgressLog(db);
    const id = first.record(attempt('sb-a', 1));
    first.flush();
    const second = new EgressLog(db);
    assert.deepEqual(
      second.list('sb-a').map((e) => e.id),
      [id],
    );
    // The second one continues the ids where the first stopped.
    assert.equal(second.record(attempt('sb-a', 2)), id + 1);
  } finally {
    db.close();
  }
});

test('writes are batched: queued records and finishes are written together shortly after, and reads see them at once', async () => {
  const db = new Database(':memory:');
  try {
    const log = new EgressLog(db);
    const count = () => (db.prepare('SELECT count(*) AS n FROM egress_log').get() as { n: number }).n;
    const a = log.record(attempt('sb-a', 1));
    log.finish(a, 10, 20); // before its row is written
    assert.equal(count(), 0, 'nothing written synchronously');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(count(), 1, 'written shortly after');
    log.finish(a, 11, 22, 'closed'); // after its row is written
    const b = log.record(attempt('sb-a', 2));
    const listed = log.list('sb-a'); // a read writes the queue first
    assert.deepEqual(
      listed.map((e) => [e.id, e.bytesUp, e.bytesDown, e.reason ?? null]),
      [
        [a, 11, 22, 'closed'],
        [b, 0, 0, null],
      ],
    );
  } finally {
    db.close();
  }
});
