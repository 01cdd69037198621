import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Recipe, type RecipeStep } from '@warren/protocol';
import { TemplateCatalog } from './catalog.js';
import { canonicalJson, sha256 } from './hashing.js';
import { planBuild } from './plan.js';

function fixture(): { dir: string; catalog: TemplateCatalog; ctx: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'warren-plan-'));
  const v = path.join(dir, 'templates', 'base', 'aaaaaaaaaaaa');
  mkdirSync(path.join(v, 'rootfs'), { recursive: true });
  writeFileSync(path.join(v, 'manifest.json'), JSON.stringify({ name: 'base', version: 'aaaaaaaaaaaa', env: { FROM_BASE: '1' }, user: 'user' }));
  symlinkSync('aaaaaaaaaaaa', path.join(dir, 'templates', 'base', 'current'));
  const ctx = path.join(dir, 'ctx');
  mkdirSync(ctx);
  writeFileSync(path.join(ctx, 'f.txt'), 'one');
  return { dir, catalog: new TemplateCatalog(path.join(dir, 'templates')), ctx };
}

const steps: RecipeStep[] = [
  { type: 'run', cmd: 'echo a' },
  { type: 'copy', src: 'f.txt', dest: '/f.txt' },
  { type: 'env', env: { K: 'v' } },
  { type: 'run', cmd: 'echo b' },
];

test('a step key changes with that step and everything before it, never with later steps', async () => {
  const { dir, catalog, ctx } = fixture();
  try {
    const withCtx = (s: RecipeStep[], extra: object = {}) =>
      planBuild({ ...Recipe.parse({ name: 't', from: 'base', steps: s, ...extra }), contextDir: ctx }, catalog);
    const a = await withCtx(steps);
    const b = await withCtx([...steps.slice(0, 3), { type: 'run', cmd: 'echo changed' }]);
    assert.deepEqual(
      a.steps.slice(0, 4).map((s) => s.key),
      b.steps.slice(0, 4).map((s) => s.key),
    );
    const [aLast, bLast] = [a.steps[4], b.steps[4]];
    assert.ok(aLast && bLast);
    assert.notEqual(aLast.key, bLast.key);

    writeFileSync(path.join(ctx, 'f.txt'), 'two');
    const c = await withCtx(steps);
    assert.deepEqual(
      c.steps.slice(0, 2).map((s) => s.key),
      a.steps.slice(0, 2).map((s) => s.key),
    );
    assert.ok(
      c.steps.slice(2).every((s, i) => s.key !== a.steps[i + 2]?.key),
      'copy and later steps change with the copied bytes',
    );

    // Names are not hashed; start/ready change the version but no step key.
    const renamed = await planBuild({ ...Recipe.parse({ name: 'other', from: 'base', steps }), contextDir: ctx }, catalog);
    assert.equal(renamed.version, c.version);
    const started = await withCtx(steps, { start: { cmd: 'sleep 1' } });
    assert.deepEqual(
      started.steps.map((s) => s.key),
      c.steps.map((s) => s.key),
    );
    assert.notEqual(started.version, c.version);

    // Runtime defaults are inherited from the base and carried through the steps.
    assert.deepEqual(c.final.env, { FROM_BASE: '1', K: 'v' });
    assert.equal(c.final.user, 'user');
    assert.deepEqual(c.steps[4]?.context.env, { FROM_BASE: '1', K: 'v' });
    assert.deepEqual(c.steps[3]?.context.env, { FROM_BASE: '1' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('plan refuses unknown bases and copy sources that are missing or outside the context', async () => {
  const { dir, catalog, ctx } = fixture();
  try {
    await assert.rejects(planBuild(Recipe.parse({ name: 't', from: 'nope' }), catalog), /from: unknown template 'nope' \(installed: base/);
    await assert.rejects(
      planBuild({ ...Recipe.parse({ name: 't', from: 'base', steps: [{ type: 'copy', src: 'x', dest: '/x' }] }), contextDir: ctx }, catalog),
      /steps\.0\.src: 'x' does not exist/,
    );
    await assert.rejects(
      planBuild({ ...Recipe.parse({ name: 't', from: 'base', steps: [{ type: 'copy', src: '../ctx2', dest: '/x' }] }), contextDir: ctx }, catalog),
      /outside the build context/,
    );
    await assert.rejects(
      planBuild(Recipe.parse({ name: 't', from: 'base', steps: [{ type: 'copy', src: 'f.txt', dest: '/x' }] }), catalog),
      /contextDir: required/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a network default is checked, hashed only when present, and inherited from the base template', async () => {
  const { dir, catalog } = fixture();
  try {
    const plan = (extra: object = {}) => planBuild(Recipe.parse({ name: 't', from: 'base', ...extra }), catalog);
    const none = await plan();
    assert.equal(none.final.network, undefined);
    // Versions built before the field existed keep their hash: it is the hash of layers, start and ready alone.
    assert.equal(none.recipeHash, sha256(canonicalJson({ layers: none.steps.at(-1)!.key, start: null, ready: null })));
    const withNet = await plan({ network: { allow: ['@github', ' api.example.com:443 '] } });
    assert.deepEqual(withNet.final.network, { allow: ['@github', 'api.example.com:443'] });
    assert.notEqual(withNet.version, none.version);
    assert.deepEqual(
      withNet.steps.map((s) => s.key),
      none.steps.map((s) => s.key),
      'no step re-runs',
    );
    const empty = await plan({ network: { allow: [] } });
    assert.deepEqual(empty.final.network, { allow: [] });
    assert.notEqual(empty.version, none.version);
    await assert.rejects(plan({ network: { allow: ['@nope'] } }), /network\.allow: unknown preset '@nope' \(known presets: @github, @npm, @pypi, @debian\)/);
    await assert.rejects(plan({ network: { allow: ['*'] } }), /network\.allow: '\*' is not a valid rule/);

    // A template built from one with a default inherits it unless its recipe sets one.
    const v = path.join(dir, 'templates', 'netbase', 'bbbbbbbbbbbb');
    mkdirSync(path.join(v, 'rootfs'), { recursive: true });
    writeFileSync(path.join(v, 'manifest.json'), JSON.stringify({ name: 'netbase', version: 'bbbbbbbbbbbb', env: {}, network: { allow: ['@npm'] } }));
    symlinkSync('bbbbbbbbbbbb', path.join(dir, 'templates', 'netbase', 'current'));
    assert.deepEqual((await planBuild(Recipe.parse({ name: 'c', from: 'netbase' }), catalog)).final.network, { allow: ['@npm'] });
    assert.deepEqual((await planBuild(Recipe.parse({ name: 'c', from: 'netbase', network: { allow: [] } }), catalog)).final.network, { allow: [] });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a key's build: run steps without network, apt only before them and from a shared template, layers of its own", async () => {
  const { dir, catalog } = fixture();
  try {
    const steps = [
      { type: 'apt', packages: ['jq'] },
      { type: 'run', cmd: 'make' },
    ];
    const recipe = (extra: object = {}) => Recipe.parse({ name: 't', from: 'base', steps, ...extra });
    const admin = await planBuild(recipe(), catalog);
    const alice = await planBuild(recipe(), catalog, { keyId: 'key-alice', fromOwn: false });
    const bob = await planBuild(recipe(), catalog, { keyId: 'key-bob', fromOwn: false });
    assert.deepEqual(
      admin.steps.map((s) => s.network),
      ['host', 'host', 'host'],
    );
    assert.deepEqual(
      alice.steps.map((s) => s.network),
      ['host', 'host', 'none'],
    );
    // No layer is shared between keys, or with the operator's builds.
    const keys = new Set([admin, alice, bob].flatMap((p) => p.steps.map((s) => s.key)));
    assert.equal(keys.size, 9);
    const late = recipe({ steps: [...steps].reverse() });
    await assert.rejects(planBuild(late, catalog, { keyId: 'key-alice', fromOwn: false }), /steps\.1: a key's apt step runs with the host's network/);
    await assert.rejects(planBuild(recipe(), catalog, { keyId: 'key-alice', fromOwn: true }), /steps\.0: .*not one of the key's own/);
    await planBuild(late, catalog); // an admin's recipe may do it
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
