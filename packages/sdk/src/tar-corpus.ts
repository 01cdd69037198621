/**
 * The corpus of the differential tar test (tar-differential.test.ts): valid trees packed by
 * packDir, Python's pack_dir and GNU tar in each format; crafted archives that hide a member
 * from one reader (a directory header with a size, a `0\0` ustar version with a prefix, a
 * regular file named `d/`, links and hard links with sizes, a lone zero block, pax and GNU
 * long-name tricks), links chained through links, odd number fields; and seeded random
 * mutations of header fields of valid archives. `expect` is set where the verdict is known.
 */
import { spawnSync } from 'node:child_process';
import { linkSync, mkdirSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import path from 'node:path';
import { END, BLOCK, gnuLong, header, member, mutate, pax, paxRecord, rng, sealChecksum, type HeaderFields } from '@warren/protocol/tar-craft';

export interface Case {
  label: string;
  bytes: Buffer;
  expect?: 'accept' | 'refuse';
}

const D = (name: string, f: HeaderFields = {}) => member({ name, type: '5', mode: 0o755, ...f });
const S = (name: string, target: string, f: HeaderFields = {}) => member({ name, type: '2', linkname: target, ...f });
const H = (name: string, target: string) => member({ name, type: '1', linkname: target });
const F = (name: string, data = 'data', f: HeaderFields = {}) => member({ name, ...f }, data);
const tar = (...parts: Buffer[]) => Buffer.concat([...parts, END]);

/**
 * Writes the trees every packer packs: short names; long, deep and non-ASCII ones; and a file
 * at the depth limit (MAX_NAME_COMPONENTS components).
 */
function makeTrees(work: string): { plain: string; long: string; deep: string } {
  const plain = path.join(work, 'plain');
  mkdirSync(path.join(plain, 'a/b'), { recursive: true });
  mkdirSync(path.join(plain, 'c'));
  mkdirSync(path.join(plain, 'empty'));
  const r = rng(7);
  for (const [name, size] of [
    ['a/f0', 0],
    ['a/b/f1', 1],
    ['c/f', 511],
    ['c/g', 512],
    ['top', 513],
    ['big', 70_000],
  ] as const) {
    writeFileSync(path.join(plain, name), Buffer.from(Array.from({ length: size }, () => r.int(256))));
  }
  chmodSync(path.join(plain, 'c/f'), 0o600);
  chmodSync(path.join(plain, 'top'), 0o755);
  linkSync(path.join(plain, 'c/f'), path.join(plain, 'c/h'));
  symlinkSync('../c', path.join(plain, 'a/l1'));
  symlinkSync('a/b', path.join(plain, 'l2'));
  symlinkSync('../../c/f', path.join(plain, 'a/b/l3'));
  symlinkSync('nothere', path.join(plain, 'dang'));
  symlinkSync('.', path.join(plain, 'dot'));
  const long = path.join(work, 'long');
  const deep = `${'d'.repeat(60)}/${'e'.repeat(60)}/${'f'.repeat(60)}`;
  mkdirSync(path.join(long, deep), { recursive: true });
  writeFileSync(path.join(long, deep, 'n'.repeat(120)), 'deep');
  // 1 + 40 * 3 bytes: a 100-byte name field cuts a character in two.
  writeFileSync(path.join(long, `a${'文'.repeat(40)}`), 'cut');
  writeFileSync(path.join(long, 'ü'.repeat(60)), 'umlaut');
  // Longer than a block: node-tar may get its metadata record in two pieces.
  const wide = `${'文'.repeat(80)}/${'字'.repeat(80)}/${'ü'.repeat(100)}`;
  mkdirSync(path.join(long, wide), { recursive: true });
  writeFileSync(path.join(long, wide, 'x'), 'wide');
  linkSync(path.join(long, 'ü'.repeat(60)), path.join(long, `hard-${'h'.repeat(110)}`));
  symlinkSync(`${deep}/${'n'.repeat(120)}`, path.join(long, 'longlink'));
  const deepest = path.join(work, 'deep');
  const parents = Array.from({ length: 127 }, () => 'd');
  mkdirSync(path.join(deepest, ...parents), { recursive: true });
  writeFileSync(path.join(deepest, ...parents, 'x'), 'deep');
  return { plain, long, deep: deepest };
}

function gnuTar(format: string, dir: string): Buffer {
  const r = spawnSync('tar', ['-c', '-f', '-', '--sort=name', `--format=${format}`, '-C', dir, '.'], { maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`tar --format=${format} failed: ${r.stderr.toString()}`);
  return r.stdout;
}

function pythonPack(dir: string, pythonPath: string): Buffer {
  const script = 'import sys\nfrom warren.dirs import pack_dir\nsys.stdout.buffer.write(b"".join(pack_dir(sys.argv[1])))';
  const r = spawnSync('python3', ['-c', script, dir], { env: { ...process.env, PYTHONPATH: pythonPath }, maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`python pack_dir failed: ${r.stderr.toString()}`);
  return r.stdout;
}

/** Valid trees as every packer writes them: all must be accepted. */
export async function packedCases(work: string, pythonPath: string, packDir: (dir: string) => AsyncIterable<unknown>): Promise<Case[]> {
  const trees = makeTrees(work);
  const out: Case[] = [];
  for (const [name, dir] of Object.entries(trees)) {
    const chunks: Buffer[] = [];
    for await (const c of packDir(dir)) chunks.push(c as Buffer);
    out.push({ label: `packDir ${name}`, bytes: Buffer.concat(chunks), expect: 'accept' });
    out.push({ label: `python pack_dir ${name}`, bytes: pythonPack(dir, pythonPath), expect: 'accept' });
    for (const format of name === 'plain' ? ['gnu', 'posix', 'ustar'] : ['gnu', 'posix'])
      out.push({ label: `GNU tar --format=${format} ${name}`, bytes: gnuTar(format, dir), expect: 'accept' });
  }
  return out;
}

/** A header whose checksum is the signed sum (GNU tar and tarfile take it, node-tar does not). */
function signedChecksum(f: HeaderFields): Buffer {
  const h = header(f);
  h.write('        ', 148, 8, 'latin1');
  let sum = 0;
  for (const b of h) sum += b > 127 ? b - 256 : b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return h;
}

function base256(value: number, width: number): Buffer {
  const b = Buffer.alloc(width);
  b[0] = 0x80;
  for (let i = width - 1, v = value; i > 0; i--, v = Math.floor(v / 256)) b[i] = v % 256;
  return b;
}

/** Ways to hide one member from one reader: each is followed by the hidden member's header. */
function hiders(hidden: Buffer): Array<[string, Buffer[]]> {
  const name = hidden.subarray(0, 100).toString('utf8').replace(/\0.*/s, '');
  const link = hidden.subarray(157, 257).toString('utf8').replace(/\0.*/s, '');
  return [
    ['a directory header with a size', [header({ name: 'hide/', type: '5', size: BLOCK }), hidden]],
    ['a regular file named hide/', [header({ name: 'hide/', type: '0', size: BLOCK }), hidden]],
    ['a symlink header with a size', [header({ name: 'hide', type: '2', linkname: 'x', size: BLOCK }), hidden]],
    ['a hard link header with a size', [F('t'), header({ name: 'hide', type: '1', linkname: 't', size: BLOCK }), hidden]],
    ['ustar version 0\\0 with a prefix', [header({ name, type: '2', linkname: link, magic: 'ustar\x000\x00', prefix: 'p/q' })]],
    ['a GNU header with prefix bytes', [header({ name, type: '2', linkname: link, magic: 'gnu', prefix: 'p/q' })]],
    ['a lone zero block', [Buffer.alloc(BLOCK), hidden]],
    ['a contiguous file', [header({ name: 'hide', type: '7', size: BLOCK }), hidden]],
    ['an unknown type', [header({ name: 'hide', type: 'Z', size: BLOCK }), hidden]],
    ['a pax size on a directory', [pax([['size', '512']]), header({ name: 'hide/', type: '5' }), hidden]],
    ['a global pax size', [pax([['size', '512']], 'g'), header({ name: 'hide', type: '0' }), hidden]],
    [
      'a pax record smuggled in a value',
      [pax([paxRecord('comment', `x\n${paxRecord('path', name).toString().trimEnd()}`)]), header({ name: `p/q/${name}`, type: '2', linkname: link })],
    ],
    ['a GNU long name with text after its NUL', [gnuLong('L', `p/q/${name}\0\n`, false), header({ name: 'zz', type: '2', linkname: link, magic: 'gnu' })]],
    [
      'a pax type',
      [
        pax([
          ['type', '2'],
          ['linkpath', link],
        ]),
        header({ name, type: '0' }),
      ],
    ],
    ['a global linkpath', [pax([['linkpath', link]], 'g'), header({ name, type: '2', linkname: 'x' })]],
    ['a name field with text after its NUL', [header({ name: Buffer.from(`p\0\n${name}`), type: '2', linkname: link })]],
    ['a signed checksum', [signedChecksum({ name: 'é', type: '0', size: BLOCK }), hidden]],
    ['a v7 header', [header({ name: 'hide', type: '0', size: BLOCK, magic: '\0\0\0\0\0\0\0\0' }), hidden]],
    ['a negative base-256 size', [header({ name: 'hide', raw: [[124, Buffer.from([0xff, ...Array(10).fill(0xff), 0x00])]] }), hidden]],
    ['a size without a terminator', [header({ name: 'hide', raw: [[124, '000000001000']] }), hidden]],
  ];
}

/** Crafted archives: escapes in plain sight, escapes hidden by each framing, and odd but valid ones. */
export function craftedCases(): Case[] {
  const out: Case[] = [];
  const refuse = (label: string, bytes: Buffer) => out.push({ label, bytes, expect: 'refuse' });
  const accept = (label: string, bytes: Buffer) => out.push({ label, bytes, expect: 'accept' });
  // s1 -> x/up/.. where x/up -> .. : DIR/s1 is DIR's parent. Deeper: two levels up from a/b.
  const flat = [D('x/'), S('x/up', '..')];
  const deep = [D('a/'), D('a/b/'), D('a/b/c/'), S('a/b/c/up', '../..')];
  refuse('chain: s1 -> x/up/.. with x/up -> ..', tar(...flat, S('s1', 'x/up/..')));
  refuse('chain: a/b/s2 -> c/up/../.. with a/b/c/up -> ../..', tar(...deep, S('a/b/s2', 'c/up/../..')));
  refuse('chain: the link comes first, what it goes through later', tar(S('s1', 'x/up/..'), ...flat));
  refuse('chain: l2 -> l1/l1/l1/.. with l1 -> .', tar(S('l1', '.'), S('l2', 'l1/l1/l1/..')));
  accept('chain inside: s1 -> x/up/x with x/up -> ..', tar(...flat, S('s1', 'x/up/x')));
  for (const [how, parts] of hiders(header({ name: 's1', type: '2', linkname: 'x/up/..' }))) refuse(`hidden flat s1 behind ${how}`, tar(...flat, ...parts));
  for (const [how, parts] of hiders(header({ name: 's2', type: '2', linkname: 'a/b/c/up/../..' })))
    refuse(`hidden deep s2 behind ${how}`, tar(...deep, ...parts));
  // The name limits (MAX_NAME_COMPONENTS, MAX_NAME_BYTES): one component deeper than the packed `deep` tree, or longer, is refused.
  const deepName = (n: number) => Array.from({ length: n }, () => 'd').join('/');
  refuse('a file 129 components deep', tar(pax([['path', deepName(129)]]), F('ignored')));
  refuse('a name of 4097 bytes', tar(pax([['path', `${'n'.repeat(200)}/`.repeat(20).padEnd(4097, 'n')]]), F('ignored')));
  refuse('a symlink target of 4097 bytes', tar(pax([['linkpath', 'l'.repeat(4097)]]), S('s', 'ignored')));
  refuse('a second file of the same name', tar(F('a', '1'), F('a', '2')));
  refuse('a file where a directory was', tar(D('a/'), F('a')));
  accept('a directory repeated', tar(D('a/'), D('a/'), F('a/f')));
  refuse('a member under a file', tar(F('f'), F('f/g')));
  refuse('a member under a hard link', tar(F('f'), H('h', 'f'), F('h/g')));
  refuse("a '.' component", tar(F('a/./b')));
  refuse('an empty component', tar(F('a//b')));
  refuse('a file named a/.', tar(F('a/.')));
  accept('hard links to a file and to a hard link', tar(F('f', 'x'), H('h', 'f'), H('./h2', './h')));
  refuse('a hard link to a symlink', tar(S('s', 'x'), H('h', 's')));
  refuse('a hard link to a directory', tar(D('d/'), H('h', 'd')));
  refuse('a link name on a directory', tar(D('d/', { linkname: 'x' })));
  refuse('a link name on a file', tar(F('f', 'x', { linkname: 'y' })));
  refuse('a symlink without a target', tar(S('s', '')));
  refuse('the root as a file', tar(F('./')));
  accept(
    'GNU long name and long link name',
    tar(gnuLong('L', `${'l'.repeat(150)}`), gnuLong('K', `${'t'.repeat(150)}`), header({ name: 'l'.repeat(99), type: '2', linkname: 'x', magic: 'gnu' })),
  );
  accept(
    'pax path and linkpath',
    tar(
      pax([
        ['path', `${'p'.repeat(150)}`],
        ['linkpath', 'q'.repeat(150)],
      ]),
      S('short', 'x'),
    ),
  );
  accept(
    'a pax size, then a GNU long name, then the file',
    tar(pax([['size', '3']]), gnuLong('L', 'n'.repeat(120)), header({ name: 'n', magic: 'gnu' }), Buffer.from('abc'), Buffer.alloc(BLOCK - 3)),
  );
  accept('pax records then NULs', tar(pax([paxRecord('path', 'padded'), Buffer.alloc(20)]), F('x')));
  refuse('a GNU long name and a pax path', tar(gnuLong('L', 'one'), pax([['path', 'two']]), F('x')));
  refuse('a pax path then a GNU long name', tar(pax([['path', 'two']]), gnuLong('L', 'one'), F('x')));
  const paddedName = gnuLong('L', 'l', false);
  paddedName.write('ong', BLOCK + 1, 'latin1'); // GNU tar reads 'long' from the padding; node-tar 'l'
  refuse('a GNU long name with bytes in its padding', tar(paddedName, F('x')));
  refuse('two GNU long names', tar(gnuLong('L', 'one'), gnuLong('L', 'two'), F('x')));
  refuse('a GNU long name before the end', tar(gnuLong('L', 'one')));
  refuse('a global header between a pax header and its member', tar(pax([['path', 'a']]), pax([['comment', 'x']], 'g'), F('x')));
  refuse(
    'a duplicate pax key',
    tar(
      pax([
        ['path', 'a'],
        ['path', 'b'],
      ]),
      F('x'),
    ),
  );
  refuse('a pax record of the wrong length', tar(pax([Buffer.from('99 path=a\n')]), F('x')));
  refuse('a pax path with a NUL', tar(pax([['path', 'a\0b']]), F('x')));
  refuse('a sparse pax key', tar(pax([['GNU.sparse.size', '10']]), F('x')));
  accept(
    'a base-256 size, mode and mtime',
    tar(
      header({
        name: 'b',
        raw: [
          [124, base256(3, 12)],
          [100, base256(0o644, 8)],
          [136, base256(1_700_000_000, 12)],
        ],
      }),
      Buffer.from('abc'),
      Buffer.alloc(BLOCK - 3),
    ),
  );
  // What GNU tar and tarfile write for a file older than 1970: it must not make a download fail.
  accept('a negative base-256 mtime', tar(header({ name: 'old', raw: [[136, Buffer.from([0xff, ...Array(10).fill(0xff), 0x38])]] }), Buffer.alloc(0)));
  accept('a size between spaces', tar(header({ name: 'sp', raw: [[124, '    1000 \0\0\0']] }), Buffer.alloc(BLOCK)));
  refuse('a name that is not UTF-8', tar(member({ name: Buffer.from([0x61, 0xff]) }, 'x')));
  refuse('bytes that look like gzip', tar(header({ name: Buffer.from([0x1f, 0x8b, 0x61]), type: 'x' }), F('x')));
  refuse('no end-of-archive block', Buffer.concat([F('x')]));
  refuse('an empty stream', Buffer.alloc(0));
  refuse('only the end-of-archive blocks', END);
  refuse('data after the end', Buffer.concat([F('x'), END, F('y')]));
  refuse('a bad checksum', tar(sealChecksum(header({ name: 'x' })).fill(0x31, 148, 149)));
  return out;
}

/** `count` seeded mutations of one header of each base archive in turn. */
export function mutatedCases(bases: Case[], count: number, seed: number): Case[] {
  const r = rng(seed);
  return Array.from({ length: count }, (_, i) => {
    const base = bases[i % bases.length] as Case;
    const { bytes, what } = mutate(base.bytes, r);
    return { label: `mutation ${i} of ${base.label}: ${what}`, bytes };
  });
}
