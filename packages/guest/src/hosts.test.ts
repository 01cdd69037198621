import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HOSTS_BLOCK_BEGIN, HOSTS_BLOCK_END } from '@warren/protocol/wire';
import { withLoopbackNames, withManagedBlock, writeManagedBlock } from './hosts.js';

const db = { address: '127.77.0.1', name: 'db.example.com' };

test('the block is added after the sandbox’s own lines and replaced in place of nothing else', () => {
  const own = '127.0.0.1 localhost\n10.0.0.5 mine.example\n';
  const once = withManagedBlock(own, [db]);
  assert.equal(once, `${own}${HOSTS_BLOCK_BEGIN}\n127.77.0.1\tdb.example.com\n${HOSTS_BLOCK_END}\n`);
  // Lines added after the block by the sandbox stay; the block is rewritten.
  const edited = `${once}192.0.2.9 later.example\n`;
  const again = withManagedBlock(edited, [{ address: '127.77.0.2', name: 'cache.example.com' }]);
  assert.equal(again, `${own}192.0.2.9 later.example\n${HOSTS_BLOCK_BEGIN}\n127.77.0.2\tcache.example.com\n${HOSTS_BLOCK_END}\n`);
  assert.equal(withManagedBlock(again, []), `${own}192.0.2.9 later.example\n`);
  assert.equal(withManagedBlock('', []), '');
  assert.equal(withManagedBlock('no newline at end', []), 'no newline at end\n');
});

test('a block whose end marker was cut drops only lines that look like ours', () => {
  const cut = `a.example 1\n${HOSTS_BLOCK_BEGIN}\n127.77.0.1\tdb.example.com\n10.1.1.1 mine.example\n`;
  assert.equal(withManagedBlock(cut, []), 'a.example 1\n10.1.1.1 mine.example\n');
});

test('writeManagedBlock creates a missing file only when there is something to write', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-hosts-'));
  try {
    const file = path.join(dir, 'hosts');
    writeManagedBlock([], file);
    assert.throws(() => readFileSync(file), /ENOENT/);
    writeManagedBlock([db], file);
    assert.match(readFileSync(file, 'utf8'), /^127\.77\.0\.1\tdb\.example\.com$/m);
    writeFileSync(file, `::1 localhost\n${readFileSync(file, 'utf8')}`);
    writeManagedBlock([], file);
    assert.equal(readFileSync(file, 'utf8'), '::1 localhost\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('localhost and the sandbox hostname are added once, the hostname line follows a new name', () => {
  const mark = '# warren: the sandbox hostname';
  const first = withLoopbackNames('', 'sb-one');
  assert.equal(first, `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsb-one\t${mark}\n`);
  assert.equal(withLoopbackNames(first, 'sb-one'), first);
  // A fork or a claim gets a new name: the old line goes.
  assert.equal(
    withLoopbackNames(`${first}10.0.0.5 mine\n`, 'sb-two'),
    `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsb-two\t${mark}\n10.0.0.5 mine\n`,
  );
  // A file that names localhost (or the hostname) itself is left alone.
  const own = '127.0.0.1 localhost sb-one\n';
  assert.equal(withLoopbackNames(own, 'sb-one'), own);
  assert.equal(
    withLoopbackNames('#127.0.0.1 localhost\n', 'bad name'),
    '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n#127.0.0.1 localhost\n',
  );
});
