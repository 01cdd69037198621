import { test } from 'node:test';
import assert from 'node:assert/strict';
import { header as block } from './tar-craft.js';
import { TarChecker, memberComponents, symlinkEscape, type TarMember } from './tar-check.js';

test('symlinkEscape resolves targets through the archive symlinks', () => {
  const none = new Map<string, string>();
  assert.equal(symlinkEscape('a/b/l', '../c', none), undefined);
  // '..' after a name climbs over what a later merged download may make a symlink.
  assert.match(symlinkEscape('a/l', '../x/../y', none) ?? '', /'\.\.' after a name/);
  assert.match(symlinkEscape('a/l', '../..', none) ?? '', /outside/);
  assert.match(symlinkEscape('l', '/etc', none) ?? '', /absolute/);
  assert.match(symlinkEscape('l', '', none) ?? '', /empty/);
  // s -> . is inside, but s/.. through it would be the destination's parent; and a link out leads out.
  assert.match(symlinkEscape('t', 's/..', new Map([['s', '.']])) ?? '', /'\.\.' after a name/);
  assert.match(symlinkEscape('t', 's/x', new Map([['s', '..']])) ?? '', /outside/);
  assert.match(symlinkEscape('loop', 'loop/x', new Map([['loop', 'loop/x']])) ?? '', /loops/);
  // A resolution's cost is bounded: components walked, and bytes of the targets it follows.
  assert.equal(symlinkEscape('l', 'x/'.repeat(256), none), undefined);
  assert.match(symlinkEscape('l', 'x/'.repeat(257), none) ?? '', /more than 256 components/);
  const chain = new Map(Array.from({ length: 3 }, (_, i): [string, string] => [`L${i}`, `L${i + 1}/${'y'.repeat(3000)}`]));
  assert.match(symlinkEscape('s', 'L0', chain) ?? '', /more than 8192 bytes of link targets/);
});

test('memberComponents takes plain relative names only', () => {
  assert.deepEqual(memberComponents('./a/b/c'), ['a', 'b', 'c']);
  assert.deepEqual(memberComponents('./d/', true), ['d']);
  assert.deepEqual(memberComponents('./'), []);
  assert.throws(() => memberComponents('/etc/x'), /absolute/);
  assert.throws(() => memberComponents('a/../../x'), /'\.\.'/);
  assert.throws(() => memberComponents('a//b'), /empty or '\.'/);
  assert.throws(() => memberComponents('a/./b'), /empty or '\.'/);
  assert.throws(() => memberComponents('f/'), /ending in '\/'/);
});

test('TarChecker refuses garbage, bytes after the end, an archive cut inside a member or before its end block', () => {
  assert.throws(() => new TarChecker().push(Buffer.alloc(512, 0x41)), /not a tar archive/);
  const ended = new TarChecker();
  ended.push(Buffer.alloc(1024));
  ended.push(Buffer.alloc(4096)); // record padding
  assert.throws(() => ended.push(Buffer.from([0, 1])), /after its end-of-archive/);
  const cut = new TarChecker();
  cut.push(Buffer.alloc(100));
  assert.throws(() => cut.end(), /ends in the middle/);
  assert.throws(() => new TarChecker().end(), /no end-of-archive block/);
});

/** One header block; `magic` is the 8 bytes at 257. */
function header(name: string, type: string, o: { size?: number; link?: string; magic?: string; prefix?: string } = {}): Buffer {
  return block({ name, type, size: o.size, linkname: o.link, magic: o.magic, prefix: o.prefix });
}

function run(...blocks: Buffer[]): TarMember[] {
  const seen: TarMember[] = [];
  const checker = new TarChecker((m) => seen.push(m));
  checker.push(Buffer.concat([...blocks, Buffer.alloc(1024)]));
  checker.end();
  return seen;
}

test('TarChecker refuses the framings that hid s1 -> x/up/.. from it, and the link in plain sight', () => {
  const base = [header('x/', '5'), header('x/up', '2', { link: '..' })];
  const s1 = header('s1', '2', { link: 'x/up/..' });
  assert.throws(() => run(...base, header('d/', '5', { size: 512 }), s1), /"d\/": a directory header with a size/);
  assert.throws(() => run(...base, header('f/', '0', { size: 512 }), s1), /"f\/": a name ending in '\/'/);
  assert.throws(() => run(...base, header('s1', '2', { link: 'x/up/..', magic: 'ustar\x000\x00', prefix: 'p' })), /neither POSIX ustar nor GNU/);
  assert.throws(() => run(...base, s1), /"s1": symlink: its target "x\/up\/\.\." has '\.\.' after a name/);
  assert.deepEqual(
    run(...base, header('s1', '2', { link: 'x/up/x' })).map((m) => `${m.type} ${m.name}`),
    ['directory x/', 'symlink x/up', 'symlink s1'],
  );
});
