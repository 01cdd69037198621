/**
 * The differential test of the tar checks (docs/security.md, "The battery"): a seeded corpus
 * (tar-corpus.ts: valid trees from every packer, members hidden behind odd framings, links
 * chained through links, odd numbers, a few hundred header mutations) goes to the checker, to
 * extractDir (node-tar, the host side of downloads) and to GNU tar (what the agent runs on
 * uploads, behind the same checker). Whenever the checker accepts, both extractors must write
 * exactly its members and nothing outside their roots; whenever it refuses, extractDir must
 * refuse and leave nothing. Then one Python process extracts the whole corpus with the Python
 * SDK, which must refuse every archive the TS SDK refuses.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { TarChecker, memberComponents, type TarMember } from '@warren/protocol';
import { extractDir, packDir } from './dirs.js';
import { craftedCases, mutatedCases, packedCases, type Case } from './tar-corpus.js';
import { rng } from '@warren/protocol/tar-craft';

const PYTHON_PATH = fileURLToPath(new URL('../../python', import.meta.url));
const MUTATIONS = 300;
/** What the agent runs on uploads (guest dirs.ts), into a directory of its own. */
const GNU_EXTRACT = ['-x', '-f', '-', '-b', '256', '-B', '-p', '--no-same-owner', '--delay-directory-restore'];

let work: string;
let corpus: Case[];
/** The TS SDK's verdict on each case, by index, for the Python comparison. */
const tsRefused = new Map<number, string>();

before(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'warren-tar-diff-'));
  const packed = await packedCases(path.join(work, 'trees'), PYTHON_PATH, (dir) => packDir(dir));
  const crafted = craftedCases();
  const bases = [...packed.filter((c) => c.label.includes('plain')), ...crafted.filter((c) => c.expect === 'accept')];
  corpus = [...packed, ...crafted, ...mutatedCases(bases, MUTATIONS, 20_240_601)];
});
after(() => rmSync(work, { recursive: true, force: true }));

function check(bytes: Buffer): { members: TarMember[]; error?: string } {
  const members: TarMember[] = [];
  try {
    const checker = new TarChecker((m) => members.push(m));
    checker.push(bytes);
    checker.end();
    return { members };
  } catch (err) {
    return { members, error: (err as Error).message };
  }
}

/** What the checker's members leave on a disk: path -> "dir" | "file SIZE" | "link -> TARGET". */
function expectedTree(members: TarMember[]): string[] {
  const tree = new Map<string, string>();
  for (const m of members) {
    const parts = memberComponents(m.name, m.type === 'directory');
    for (let i = 1; i < parts.length; i++) if (!tree.has(parts.slice(0, i).join('/'))) tree.set(parts.slice(0, i).join('/'), 'dir');
    const p = parts.join('/');
    if (p === '') continue;
    if (m.type === 'directory') tree.set(p, 'dir');
    else if (m.type === 'symlink') tree.set(p, `link -> ${m.linkname}`);
    else if (m.type === 'file') tree.set(p, `file ${m.size}`);
    else tree.set(p, tree.get(memberComponents(m.linkname).join('/')) ?? 'dangling hard link');
  }
  return [...tree].map(([p, what]) => `${p} ${what}`).sort();
}

/** What is on the disk under root, never following a link; files with a hash of their contents. Names as bytes: an extractor may write any. */
function onDisk(root: string): string[] {
  const out: string[] = [];
  const show = (b: Buffer) => (Buffer.from(b.toString('utf8')).equals(b) ? b.toString('utf8') : `<bytes ${b.toString('hex')}>`);
  const walk = (rel: Buffer) => {
    for (const name of readdirSync(Buffer.concat([Buffer.from(`${root}/`), rel]), { encoding: 'buffer' })) {
      const r = rel.length ? Buffer.concat([rel, Buffer.from('/'), name]) : name;
      const full = Buffer.concat([Buffer.from(`${root}/`), r]);
      const st = lstatSync(full);
      if (st.isDirectory()) {
        out.push(`${show(r)} dir`);
        walk(r);
      } else if (st.isSymbolicLink()) out.push(`${show(r)} link -> ${show(readlinkSync(full, { encoding: 'buffer' }))}`);
      else if (st.isFile()) out.push(`${show(r)} file ${st.size} ${createHash('sha1').update(readFileSync(full)).digest('hex').slice(0, 12)}`);
      else out.push(`${show(r)} other`);
    }
  };
  walk(Buffer.alloc(0));
  return out.sort();
}

const withoutHashes = (tree: string[]) => tree.map((l) => l.replace(/ (file \d+) [0-9a-f]{12}$/, ' $1'));

/** The archive in pieces: whole, in small pieces (metadata cut anywhere), or in larger ones. */
function pieces(bytes: Buffer, r: ReturnType<typeof rng>): Buffer[] {
  const most = r.pick([bytes.length || 1, 64, 4096]);
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; ) {
    const n = 1 + r.int(most);
    out.push(bytes.subarray(at, at + n));
    at += n;
  }
  return out;
}

/** A fresh root inside a parent that holds a sentinel; the parent's listing after `run` must be as expected. */
async function inSandboxedParent<T>(
  expectOut: (result: T) => boolean,
  run: (out: string) => Promise<T> | T,
): Promise<{ result: T; tree?: string[]; outside?: string }> {
  const parent = mkdtempSync(path.join(work, 'x-'));
  writeFileSync(path.join(parent, 'sentinel'), 'sentinel');
  try {
    const result = await run(path.join(parent, 'out'));
    const listing = readdirSync(parent).sort().join(',');
    const wanted = expectOut(result) ? 'out,sentinel' : 'sentinel';
    const outside = listing !== wanted || readFileSync(path.join(parent, 'sentinel'), 'utf8') !== 'sentinel' ? `beside the root: ${listing}` : undefined;
    return { result, tree: expectOut(result) ? onDisk(path.join(parent, 'out')) : undefined, outside };
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
}

test('the checker refuses an archive, or sees exactly the members node-tar and GNU tar write', async () => {
  const r = rng(99);
  const failures: string[] = [];
  let accepted = 0;
  for (const [i, c] of corpus.entries()) {
    const verdict = check(c.bytes);
    const fail = (why: string) => failures.push(`${c.label}: ${why}`);
    if (c.expect === 'accept' && verdict.error) fail(`refused by the checker: ${verdict.error}`);
    if (c.expect === 'refuse' && !verdict.error) fail('accepted by the checker');
    const chunks = pieces(c.bytes, r);
    const node = await inSandboxedParent<string | undefined>(
      (res) => res === undefined,
      (out) =>
        extractDir(Readable.from(chunks), out).then(
          () => undefined,
          (err: Error) => err.message,
        ),
    );
    if (node.outside) fail(`extractDir left something ${node.outside}`);
    if (node.result !== undefined) tsRefused.set(i, node.result);
    if (verdict.error) {
      if (node.result === undefined) fail(`the checker refused (${verdict.error}) but extractDir accepted`);
      continue;
    }
    accepted++;
    const expected = expectedTree(verdict.members);
    if (node.result !== undefined) fail(`the checker accepted but extractDir refused: ${node.result}`);
    else if (withoutHashes(node.tree ?? []).join('\n') !== expected.join('\n'))
      fail(
        `node-tar wrote other members than the checker saw:\n  checker:  ${expected.join(' | ')}\n  node-tar: ${withoutHashes(node.tree ?? []).join(' | ')}`,
      );
    const gnu = await inSandboxedParent(
      () => true,
      (out) => {
        mkdirSync(out);
        return spawnSync('tar', [...GNU_EXTRACT, '-C', out], { input: c.bytes });
      },
    );
    if (gnu.outside) fail(`GNU tar left something ${gnu.outside}`);
    if (gnu.result.status !== 0) fail(`the checker accepted but GNU tar failed: ${gnu.result.stderr.toString().trim()}`);
    else if (node.tree && gnu.tree && node.tree.join('\n') !== gnu.tree.join('\n'))
      fail(`GNU tar and node-tar wrote different trees:\n  node-tar: ${node.tree.join(' | ')}\n  GNU tar:  ${gnu.tree.join(' | ')}`);
  }
  assert.deepEqual(failures, []);
  // The corpus must exercise both sides: a generator that only makes garbage proves nothing.
  assert.ok(accepted >= 40 && tsRefused.size >= 150, `accepted ${accepted}, refused ${tsRefused.size} of ${corpus.length}`);
});

test('the Python SDK refuses every archive the TS SDK refuses', () => {
  assert.ok(tsRefused.size > 0, 'the differential test above ran first');
  const dir = path.join(work, 'python');
  mkdirSync(dir);
  for (const [i, c] of corpus.entries()) writeFileSync(path.join(dir, `${String(i).padStart(4, '0')}.tar`), c.bytes);
  const script = `
import json, os, shutil, sys, tempfile
from warren.dirs import extract_dir
src, out = sys.argv[1], {}
for f in sorted(os.listdir(src)):
    parent = tempfile.mkdtemp(dir=sys.argv[2])
    try:
        with open(os.path.join(src, f), "rb") as fh:
            extract_dir(fh, os.path.join(parent, "out"))
        out[f] = None
    except Exception as e:
        out[f] = f"{type(e).__name__}: {e}"
    shutil.rmtree(parent)
print(json.dumps(out))
`;
  const r = spawnSync('python3', ['-c', script, dir, work], { env: { ...process.env, PYTHONPATH: PYTHON_PATH }, maxBuffer: 1 << 26 });
  assert.equal(r.status, 0, r.stderr.toString());
  const verdicts = JSON.parse(r.stdout.toString()) as Record<string, string | null>;
  const missed = [...tsRefused].filter(([i]) => verdicts[`${String(i).padStart(4, '0')}.tar`] === null).map(([i, why]) => `${corpus[i]?.label} (TS: ${why})`);
  assert.deepEqual(missed, [], `the Python SDK accepted ${missed.length} archive(s) the TS SDK refuses`);
});
