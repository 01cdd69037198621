/**
 * The files of the workload suite, built on the host once per run and deterministically (a
 * seeded generator, fixed package choices), so that the host and the sandbox work on the
 * same bytes: the sandbox gets them as one tar of this directory.
 *
 *   repo/src/lib  3,000 source files (find | xargs cat), repo/src/app 2,000 more (git, grep)
 *   pytests/      30 modules of 10 unittest tests
 *   ts/           what `tsc --noEmit -p packages/daemon` reads from this checkout (its
 *                 --listFilesOnly, widened to whole packages), symlinks kept
 *   npmproj/      a package.json and lock of file: tarballs of dependency-free packages
 *                 packed from this checkout's node_modules (no registry)
 *   wheels/       a small wheel, built with the standard library's zipfile
 *   tools/        npm (a copy of the host's) and pip (Debian's pip wheel, run from the wheel):
 *                 the base template has neither
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO } from '@warren/tests/harness';

export const LIB_FILES = 3000;
const APP_FILES = 2000;
const TEST_MODULES = 30;
const TESTS_PER_MODULE = 10;
const NPM_PACKAGES = 60;
/** Packages bigger than this stay out of the npm project: the point is many small packages. */
const NPM_MAX_PACKAGE_BYTES = 3_000_000;
const HOST_NPM = '/usr/lib/node_modules/npm';
const PIP_WHEELS = '/usr/share/python-wheels';
export const WHEEL = 'wheels/warren_bench_pkg-1.0-py3-none-any.whl';

/** mulberry32: a small seeded PRNG, so every run generates the same files. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  'sandbox',
  'kernel',
  'commit',
  'index',
  'tree',
  'blob',
  'stream',
  'buffer',
  'handle',
  'config',
  'parse',
  'render',
  'worker',
  'queue',
  'cache',
  'token',
];

function sourceFile(rand: () => number, i: number): string {
  const pick = () => WORDS[Math.floor(rand() * WORDS.length)] ?? 'x';
  const lines = [`// generated module ${i}`, `import { helper } from '../shared';`, ''];
  const fns = 2 + Math.floor(rand() * 6);
  for (let f = 0; f < fns; f++) {
    lines.push(`export function ${pick()}${i}_${f}(input: string, n: number): string {`);
    const body = 3 + Math.floor(rand() * 10);
    for (let b = 0; b < body; b++) {
      lines.push(`  const ${pick()}${b} = helper(input, n + ${Math.floor(rand() * 1000)}, '${pick()} ${pick()}');`);
      if (rand() < 0.05) lines.push(`  // TODO: ${pick()} the ${pick()} before the ${pick()}`);
    }
    lines.push(`  return input + String(n);`, '}', '');
  }
  return lines.join('\n');
}

function writeRepo(dir: string): void {
  const rand = prng(42);
  const write = (sub: string, count: number, offset: number) => {
    for (let i = 0; i < count; i++) {
      const d = path.join(dir, 'src', sub, `d${String(i % 60).padStart(2, '0')}`);
      mkdirSync(d, { recursive: true });
      writeFileSync(path.join(d, `f${String(offset + i).padStart(5, '0')}.ts`), sourceFile(rand, offset + i));
    }
  };
  write('lib', LIB_FILES, 0);
  write('app', APP_FILES, LIB_FILES);
  writeFileSync(path.join(dir, 'README.md'), '# generated repository for the workload bench\n');
}

function writePyTests(dir: string): void {
  mkdirSync(dir, { recursive: true });
  for (let m = 0; m < TEST_MODULES; m++) {
    const lines = ['import unittest', 'import json', '', '', `class TestModule${m}(unittest.TestCase):`];
    for (let t = 0; t < TESTS_PER_MODULE; t++) {
      const k = m * TESTS_PER_MODULE + t;
      lines.push(
        `    def test_${t}(self):`,
        `        data = [i * ${k + 1} for i in range(200)]`,
        `        self.assertEqual(sum(data), ${(k + 1) * 19900})`,
        `        self.assertEqual(json.loads(json.dumps({'k': ${k}})), {'k': ${k}})`,
        '',
      );
    }
    writeFileSync(path.join(dir, `test_m${String(m).padStart(2, '0')}.py`), `${lines.join('\n')}\n`);
  }
}

/** Every path tsc reads for the daemon, widened to whole packages (their package.json and neighbours matter to resolution). */
function copyTsInputs(dest: string): void {
  const listed = execFileSync(process.execPath, [path.join(REPO, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', 'packages/daemon', '--listFilesOnly'], {
    cwd: REPO,
    encoding: 'utf8',
    maxBuffer: 64 * 2 ** 20,
  });
  const roots = new Set<string>(['tsconfig.base.json', 'package.json', 'packages/daemon/src', 'packages/daemon/tsconfig.json', 'packages/daemon/package.json']);
  for (const abs of listed.split('\n').filter(Boolean)) {
    const rel = path.relative(REPO, abs);
    const parts = rel.split(path.sep);
    if (parts[0] === 'node_modules') roots.add(parts.slice(0, parts[1]?.startsWith('@') ? 3 : 2).join('/'));
  }
  // Every workspace package's manifest, tsconfig and built declarations: tsc opens the
  // projects the daemon references even where it reads none of their files.
  for (const name of readdirSync(path.join(REPO, 'packages'))) {
    for (const f of ['package.json', 'tsconfig.json', 'dist']) if (existsSync(path.join(REPO, 'packages', name, f))) roots.add(`packages/${name}/${f}`);
  }
  // The workspace links (node_modules/@warren/x -> ../../packages/x), as links.
  for (const name of readdirSync(path.join(REPO, 'node_modules/@warren'))) roots.add(`node_modules/@warren/${name}`);
  for (const rel of [...roots].sort()) {
    const to = path.join(dest, rel);
    mkdirSync(path.dirname(to), { recursive: true });
    cpSync(path.join(REPO, rel), to, { recursive: true, verbatimSymlinks: true, filter: (src) => !src.endsWith('.map') && !src.endsWith('.tsbuildinfo') });
  }
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += dirBytes(p);
    else if (e.isFile()) n += lstatSync(p).size;
  }
  return n;
}

/** Top-level packages of this checkout with no dependencies of any kind and no install scripts, by name. */
function dependencyFreePackages(): string[] {
  const nm = path.join(REPO, 'node_modules');
  const out: string[] = [];
  for (const name of readdirSync(nm).sort()) {
    if (name.startsWith('.') || name.startsWith('@')) continue;
    const dir = path.join(nm, name);
    if (lstatSync(dir).isSymbolicLink() || !existsSync(path.join(dir, 'package.json'))) continue;
    const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    const deps = ['dependencies', 'optionalDependencies', 'peerDependencies'].some((k) => Object.keys(pkg[k] ?? {}).length > 0);
    const scripts = pkg.scripts ?? {};
    if (deps || scripts.install || scripts.preinstall || scripts.postinstall) continue;
    if (dirBytes(dir) > NPM_MAX_PACKAGE_BYTES) continue;
    out.push(name);
    if (out.length === NPM_PACKAGES) break;
  }
  return out;
}

/** npm pack of each package (no scripts), then a lock written offline: the registry is never asked. */
function writeNpmProject(dir: string, home: string): number {
  const tarballs = path.join(dir, 'tarballs');
  mkdirSync(tarballs, { recursive: true });
  const names = dependencyFreePackages();
  const npm = [path.join(HOST_NPM, 'bin/npm-cli.js')];
  const env = { ...process.env, HOME: home, npm_config_cache: path.join(home, '.npm-pack'), npm_config_update_notifier: 'false' };
  const packed = JSON.parse(
    execFileSync(
      process.execPath,
      [...npm, 'pack', '--json', '--ignore-scripts', '--pack-destination', tarballs, ...names.map((n) => path.join(REPO, 'node_modules', n))],
      {
        cwd: dir,
        env,
        encoding: 'utf8',
        maxBuffer: 64 * 2 ** 20,
      },
    ),
  ) as { name: string; filename: string }[];
  const dependencies: Record<string, string> = {};
  for (const p of packed) dependencies[p.name] = `file:tarballs/${p.filename}`;
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'workload-npm', version: '1.0.0', private: true, dependencies }, null, 2));
  execFileSync(process.execPath, [...npm, 'install', '--package-lock-only', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], {
    cwd: dir,
    env,
    stdio: 'pipe',
  });
  return packed.length;
}

const WHEEL_SCRIPT = `
import base64, hashlib, sys, zipfile
out = sys.argv[1]
files = {}
for i in range(40):
    files['warren_bench_pkg/mod%02d.py' % i] = ''.join('def f%d(x):\\n    return x * %d\\n\\n' % (j, i + j) for j in range(30))
files['warren_bench_pkg/__init__.py'] = 'VERSION = "1.0"\\n'
di = 'warren_bench_pkg-1.0.dist-info/'
files[di + 'METADATA'] = 'Metadata-Version: 2.1\\nName: warren-bench-pkg\\nVersion: 1.0\\n'
files[di + 'WHEEL'] = 'Wheel-Version: 1.0\\nGenerator: warren-bench\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'
files[di + 'top_level.txt'] = 'warren_bench_pkg\\n'
record = []
for name, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()
    record.append('%s,sha256=%s,%d' % (name, digest, len(text.encode())))
record.append(di + 'RECORD,,')
files[di + 'RECORD'] = '\\n'.join(record) + '\\n'
with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
    for name in sorted(files):
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        z.writestr(info, files[name])
`;

/** Debian's pip wheel (python3-pip-whl), which runs straight from the zip. */
function pipWheel(): string {
  const found = existsSync(PIP_WHEELS) ? readdirSync(PIP_WHEELS).find((f) => /^pip-.*\.whl$/.test(f)) : undefined;
  if (!found) throw new Error(`no pip wheel in ${PIP_WHEELS}: apt-get install python3-pip-whl`);
  return path.join(PIP_WHEELS, found);
}

export interface Staged {
  /** The workspace: commands run with this as their working directory. */
  dir: string;
  /** One tar of the workspace, for the sandbox. */
  tar: string;
  npmPackages: number;
}

/** Builds the workspace under `root` (workspace in root/ws, an empty HOME in root/home). */
export function stage(root: string): Staged {
  const dir = path.join(root, 'ws');
  const home = path.join(root, 'home');
  mkdirSync(dir, { recursive: true });
  mkdirSync(home, { recursive: true });
  writeRepo(path.join(dir, 'repo'));
  writePyTests(path.join(dir, 'pytests'));
  copyTsInputs(path.join(dir, 'ts'));
  const npmPackages = writeNpmProject(path.join(dir, 'npmproj'), home);
  mkdirSync(path.join(dir, 'wheels'), { recursive: true });
  execFileSync('/usr/bin/python3', ['-c', WHEEL_SCRIPT, path.join(dir, WHEEL)]);
  mkdirSync(path.join(dir, 'tools'), { recursive: true });
  cpSync(HOST_NPM, path.join(dir, 'tools/npm'), { recursive: true, verbatimSymlinks: true });
  cpSync(pipWheel(), path.join(dir, 'tools/pip.whl'));
  const tar = path.join(root, 'ws.tar');
  execFileSync('tar', ['cf', tar, '-C', dir, '.']);
  return { dir, tar, npmPackages };
}
