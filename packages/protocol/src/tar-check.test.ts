import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TarChecker, memberComponents, symlinkEscape } from './tar-check.js';

test('symlinkEscape resolves targets through the archive symlinks', () => {
  const none = new Map<string, string>();
  assert.equal(symlinkEscape('a/b/l', '../c', none), undefined);
  assert.equal(symlinkEscape('a/l', '../x/../y', none), undefined);
  assert.match(symlinkEscape('a/l', '../..', none) ?? '', /outside/);
  assert.match(symlinkEscape('l', '/etc', none) ?? '', /absolute/);
  assert.match(symlinkEscape('l', '', none) ?? '', /empty/);
  // s -> . is inside, but s/.. through it is the destination's parent.
  const links = new Map([['s', '.']]);
  assert.match(symlinkEscape('t', 's/..', links) ?? '', /outside/);
  assert.match(symlinkEscape('loop', 'loop/x', new Map([['loop', 'loop/x']])) ?? '', /loops/);
});

test('memberComponents refuses absolute names and ..', () => {
  assert.deepEqual(memberComponents('./a//b/./c'), ['a', 'b', 'c']);
  assert.deepEqual(memberComponents('./'), []);
  assert.throws(() => memberComponents('/etc/x'), /absolute/);
  assert.throws(() => memberComponents('a/../../x'), /'\.\.'/);
});

test('TarChecker refuses garbage, bytes after the end, and an archive cut inside a member', () => {
  assert.throws(() => new TarChecker().push(Buffer.alloc(512, 0x41)), /not a tar archive/);
  const ended = new TarChecker();
  ended.push(Buffer.alloc(1024));
  ended.push(Buffer.alloc(4096)); // record padding
  assert.throws(() => ended.push(Buffer.from([0, 1])), /after its end-of-archive/);
  const cut = new TarChecker();
  cut.push(Buffer.alloc(100));
  assert.throws(() => cut.end(), /ends in the middle/);
  assert.deepEqual(new TarChecker().end(), { files: 0, directories: 0, symlinks: 0, hardlinks: 0, bytes: 0, hasRoot: false });
});
