/**
 * The shipped `dev` template (templates/dev/recipe.json): every toolchain it promises runs
 * inside a sandbox made from it, as the sandbox's user. The template is not built here: its
 * build installs Debian packages from the mirror (network, and minutes of work), which tests
 * never reach. It is built once per machine with `warren template build
 * templates/dev/recipe.json` (docs/templates.md; `scripts/setup.sh`, which `npm test` runs
 * first, builds it); without it in the templates dir every test here fails, saying how to
 * build it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Sandbox } from '@warren/sdk';
import { TEMPLATES, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const INSTALLED = existsSync(path.join(TEMPLATES, 'dev/current/rootfs/usr/bin/rg'));
const MISSING = `the dev template is not built in ${TEMPLATES}: run ./bin/warren template build templates/dev/recipe.json`;

let d: DaemonHandle | undefined;
let sbx: Sandbox;
const started = Date.now();

before(async () => {
  if (!INSTALLED) throw new Error(MISSING);
  d = await startDaemon();
  sbx = await d.create({ template: 'dev', ttlSeconds: 900 });
});
after(async () => {
  await stopAndCheckClean(d);
  if (INSTALLED) console.log(`# dev template test: ${((Date.now() - started) / 1000).toFixed(1)} s in all`);
});

async function run(cmd: string): Promise<string> {
  const r = await sbx.exec(cmd, { timeoutSeconds: 300, cwd: '/home/user' });
  assert.equal(r.exitCode, 0, `${cmd} failed (${r.exitCode}): ${r.stderr}${r.stdout}`);
  return r.stdout + r.stderr;
}

const VERSIONS: Array<[string, RegExp]> = [
  ['go version', /go version go1\.\d+/],
  ['rg --version', /ripgrep \d+/],
  ['npm --version', /^\d+\.\d+/],
  ['node --version', /^v\d+/],
  ['gcc --version', /gcc/],
  ['make --version', /GNU Make/],
  ['psql --version', /psql \(PostgreSQL\) \d+/],
  ['sqlite3 --version', /^3\.\d+/],
  ['jq --version', /jq-1\.\d/],
  ['git --version', /git version/],
  ['unzip -v', /UnZip \d/],
  ['curl --version', /curl \d/],
  ['python3 -m pip --version', /pip \d+/],
  ['bun --version', /^1\.\d+\.\d+/],
  ['corepack --version', /^0\.\d+\.\d+/],
];

for (const [cmd, want] of VERSIONS) {
  test(`dev: ${cmd}`, async () => {
    assert.match(await run(cmd), want);
  });
}

test('dev: the toolchains build and run something', async () => {
  // C through make, as a build would.
  await run(
    `mkdir -p c && cd c && printf '#include <stdio.h>\\nint main(void){puts("c ok");return 0;}\\n' > m.c && printf 'm: m.c\\n\\tgcc -O2 -o m m.c\\n' > Makefile && make -s && ./m`,
  );
  assert.match(await run('./c/m'), /c ok/);
  await run(
    `mkdir -p g && cd g && printf 'package main\\nimport "fmt"\\nfunc main(){fmt.Println("go ok")}\\n' > main.go && go mod init example.com/g 2>/dev/null; go build -o hello . && ./hello`,
  );
  assert.match(await run('./g/hello'), /go ok/);
  // A venv with pip inside, the way an agent sets up a Python project (no index reached).
  assert.match(await run('python3 -m venv v && ./v/bin/python -m pip --version && ./v/bin/python -c "import sys; print(sys.prefix)"'), /\/home\/user\/v/);
  assert.match(await run(`sqlite3 :memory: 'select 6*7'`), /42/);
  assert.match(await run(`echo '{"a":{"b":7}}' | jq .a.b`), /7/);
  assert.match(await run('mkdir -p js && cd js && npm init -y >/dev/null && node -e "console.log(require(\'./package.json\').name)"'), /js/);
  assert.match(await run('rg -n "go ok" g/main.go'), /^3:/);
  // bun runs TypeScript directly and has its own APIs.
  assert.match(await run(`printf 'const n: number = 6 * 7;\\nconsole.log("bun", n, typeof Bun.file);\\n' > t.ts && bun run t.ts`), /bun 42 function/);
});
