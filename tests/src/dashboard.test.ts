/**
 * The dashboard in a real browser (docs/dashboard.md): Debian's chromium driven by
 * puppeteer-core. Logged out it shows a key form and nothing else; a `warren ui --url` link
 * logs in once; the list shows a sandbox with its metadata (escaped); Fork puts a child under
 * its parent in the tree; the terminal echoes what is typed; Hibernate and Resume work from
 * their buttons; and the session's cookie cannot be used from another origin or without the
 * CSRF token. Screenshots of each page go to tests/output/dashboard/.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { Sandbox, Template, TemplateBuildError } from '@warren/sdk';
import type { TemplateBuildLogList, TemplateVersionList } from '@warren/protocol';
import { REPO, WEBSOCKET_UPGRADE_HEADERS, eventually, requestStatus, runWarren, sleep, startDaemon, stopAndCheckClean, type DaemonHandle } from './harness.js';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = path.join(REPO, 'tests/output/dashboard');
const T = { timeout: 120_000 };
/** A metadata value that would run script if the page put it into HTML unescaped. */
const HOSTILE = '<img src=x onerror="document.title=`pwned`">';

let d: DaemonHandle;
let browser: Browser;
let profile: string;
let sbx: Sandbox;

before(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run \`bash scripts/setup.sh\` (it installs Debian's chromium)`);
  mkdirSync(SHOTS, { recursive: true });
  d = await startDaemon();
  sbx = await d.create({ metadata: { task: 'dash-e2e', note: HOSTILE } });
  profile = mkdtempSync(path.join(tmpdir(), 'warren-chromium-'));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    // As root, chromium runs only without its own sandbox; the pages are this test's own.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  await browser?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  await stopAndCheckClean(d);
});

async function newPage(width = 1280): Promise<Page> {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width, height: 900 });
  page.on('pageerror', (err) => pageErrors.push(err instanceof Error ? err.message : String(err)));
  return page;
}

/** Uncaught errors of the dashboard's script in any page: each screenshot checks there are none. */
const pageErrors: string[] = [];

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  assert.deepEqual(pageErrors, [], 'the dashboard threw no errors');
}

function loginLink(): string {
  const r = runWarren(d, ['ui', '--url']);
  assert.equal(r.code, 0, r.stderr);
  const url = r.stdout.trim();
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/ui\/login\?token=[\w-]{43}$/);
  return url;
}

async function loggedIn(width = 1280): Promise<Page> {
  const page = await newPage(width);
  await page.goto(loginLink(), { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('header nav');
  return page;
}

/** Text of the first element matching `selector`, once `pattern` shows in it. */
async function waitForText(page: Page, selector: string, pattern: RegExp, what: string): Promise<string> {
  let last = '';
  try {
    return await eventually(
      async () => {
        last = await page.$eval(selector, (el) => el.textContent ?? '').catch((err: Error) => `(${err.message})`);
        return pattern.test(last) ? last : undefined;
      },
      60_000,
      what,
      100,
    );
  } catch (err) {
    await page.screenshot({ path: path.join(SHOTS, `failed-${what.replace(/\W+/g, '-')}.png`), fullPage: true });
    throw new Error(`${(err as Error).message}; ${selector} showed: ${JSON.stringify(last.slice(0, 500))}`);
  }
}

test('without a session the page shows the login form and nothing else; the API refuses the browser', T, async () => {
  const page = await newPage();
  await page.goto(`${d.url}/ui/`, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('input#key');
  const body = await page.$eval('body', (el) => el.textContent ?? '');
  assert.ok(!body.includes(sbx.id), 'no sandbox id before login');
  const status = await page.evaluate(async () => (await fetch('/v1/sandboxes')).status);
  assert.equal(status, 401);
  await shot(page, '01-login');
  // A wrong key is refused with the daemon's word; the right one logs in.
  await page.type('input#key', 'wk_not-a-key');
  await page.click('main.login button[type=submit]');
  await waitForText(page, 'main.login [role=alert]', /invalid API key/, 'the login form reports a wrong key');
  await page.$eval('input#key', (el) => {
    (el as HTMLInputElement).value = '';
  });
  await page.type('input#key', d.apiKey);
  await page.click('main.login button[type=submit]');
  await page.waitForSelector(`tr[data-id="${sbx.id}"]`);
  await page.close();
});

test('a login link works once, sets an HttpOnly SameSite=Strict cookie, and the list shows the sandbox with its metadata escaped', T, async () => {
  const link = loginLink();
  const page = await newPage();
  await page.goto(link, { waitUntil: 'domcontentloaded' });
  assert.equal(new URL(page.url()).pathname, '/ui/');
  const row = `tr[data-id="${sbx.id}"]`;
  await page.waitForSelector(row);
  const text = await waitForText(page, row, /running/, 'the sandbox row shows it running');
  assert.match(text, /task=dash-e2e/);
  assert.ok(text.includes(HOSTILE), 'the hostile metadata value shows as text');
  assert.equal(await page.$$eval('table.sandboxes img', (els) => els.length), 0, 'no element was made from metadata');
  assert.notEqual(await page.title(), 'pwned');
  const [cookie] = (await page.browserContext().cookies()).filter((c) => c.name === 'warren_session');
  assert.ok(cookie, 'the session cookie is set');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(await page.evaluate(() => document.cookie), '', 'the page cannot read the session cookie');
  // CPU and memory come in through the live stream within a few ticks.
  await waitForText(page, row, /\d+(\.\d)? MiB/, 'the row shows the memory the sandbox uses');
  // Filters: a state that does not match hides the row; the metadata filter keeps it.
  await page.select('.filters select', 'hibernated');
  await page.waitForSelector(row, { hidden: true });
  await page.select('.filters select', '');
  await page.type('.filters input[placeholder="key=value"]', 'task=dash-e2e');
  await page.waitForSelector(row);
  await shot(page, '02-sandboxes');

  // Spent: the same link again, in a fresh browser context, lands on the login form.
  const again = await newPage();
  await again.goto(link, { waitUntil: 'domcontentloaded' });
  await again.waitForSelector('input#key');
  await waitForText(again, 'main.login', /expired or was already used/, 'a spent link says so');
  await again.close();
  await page.close();
});

test('Fork from the sandbox page puts a child under its parent in the fork tree', T, async () => {
  const page = await loggedIn();
  await page.goto(`${d.url}/ui/#/sandbox/${sbx.id}`);
  await page.waitForSelector(`button[aria-label="Fork ${sbx.id}"]`);
  await page.click(`button[aria-label="Fork ${sbx.id}"]`);
  const status = await waitForText(page, '.actions [role=status]', /forked: sb-\w+/, 'the fork reports its child');
  const child = /forked: (sb-\w+)/.exec(status)?.[1] ?? '';
  assert.ok(
    (await Sandbox.list(d.conn)).some((s) => s.id === child && s.source === sbx.id),
    'the daemon has the child, forked from the parent',
  );
  await page.goto(`${d.url}/ui/#/tree/${sbx.id}`);
  let underParent: string[] = [];
  await eventually(
    async () => {
      underParent = await page.evaluate((parent) => {
        const node = [...document.querySelectorAll('ul.tree li')].find((li) => li.firstElementChild?.textContent?.includes(parent));
        return [...(node?.querySelectorAll(':scope > ul > li') ?? [])].map((li) => li.firstElementChild?.textContent ?? '');
      }, sbx.id);
      return underParent.some((t) => t.includes(child)) || undefined;
    },
    30_000,
    `the tree shows ${child} under ${sbx.id} (under it: ${JSON.stringify(underParent)})`,
  );
  await shot(page, '03-fork-tree');
  // Clicking the child opens its page.
  await page.click(`ul.tree a[href="#/sandbox/${child}"]`);
  await waitForText(page, '#sandbox-title', new RegExp(child), "the child's page opens");

  // From the list: Set TTL asks for seconds, Kill asks for confirmation (declined once, then accepted).
  await page.goto(`${d.url}/ui/#/`);
  const row = `tr[data-id="${child}"]`;
  await page.waitForSelector(row);
  const answers = ['120', false, true];
  page.on('dialog', (dialog) => {
    const answer = answers.shift();
    void (answer === false ? dialog.dismiss() : dialog.accept(typeof answer === 'string' ? answer : undefined));
  });
  await page.click(`button[aria-label="Set TTL ${child}"]`);
  await waitForText(page, 'section [role=status]', new RegExp(`TTL of ${child} set to 120 s`), 'the TTL change is reported');
  const expires = Date.parse((await Sandbox.connect(child, d.conn)).info.expiresAt) - Date.now();
  assert.ok(expires > 100_000 && expires <= 120_000, `expires in ${expires} ms`);
  await waitForText(page, `${row} td:nth-child(6)`, /^(1m|1m \d+s|2m)$/, 'the row shows the new TTL');
  await page.click(`button[aria-label="Kill ${child}"]`);
  await sleep(500);
  assert.ok(await page.$(row), 'declining the confirmation keeps the sandbox');
  await page.click(`button[aria-label="Kill ${child}"]`);
  await page.waitForSelector(row, { hidden: true, timeout: 30_000 });
  assert.ok(!(await Sandbox.list(d.conn)).some((s) => s.id === child), 'the child is gone from the daemon');
  await page.close();
});

test('the terminal in the browser runs what is typed and shows its output', T, async () => {
  const page = await loggedIn();
  await page.goto(`${d.url}/ui/#/sandbox/${sbx.id}`);
  await page.waitForSelector('[role=tab]');
  const [terminalTab] = await page.$$('xpath/.//button[@role="tab" and text()="Terminal"]');
  assert.ok(terminalTab, 'a Terminal tab');
  await terminalTab.click();
  await waitForText(page, '.terminal [role=status]', /connected/, 'the terminal connects');
  await page.click('.xterm-box');
  // The marker is computed by the shell, so the echoed command line never matches.
  await page.keyboard.type('echo dash-$((6*7))-ok\n');
  await waitForText(page, '.xterm-rows', /dash-42-ok/, 'the terminal shows the command output');
  await shot(page, '04-terminal');
  await page.close();
});

test('Hibernate and Resume from the buttons change the sandbox, and the page follows', T, async () => {
  const page = await loggedIn();
  await page.goto(`${d.url}/ui/#/sandbox/${sbx.id}`);
  await page.waitForSelector(`button[aria-label="Hibernate ${sbx.id}"]`);
  await page.click(`button[aria-label="Hibernate ${sbx.id}"]`);
  await waitForText(page, '#sandbox-title', /hibernated/, 'the page shows it hibernated');
  assert.equal((await Sandbox.connect(sbx.id, d.conn)).info.state, 'hibernated');
  await shot(page, '05-hibernated');
  await page.click(`button[aria-label="Resume ${sbx.id}"]`);
  await waitForText(page, '#sandbox-title', /running/, 'the page shows it running again');
  assert.equal((await Sandbox.connect(sbx.id, d.conn)).info.state, 'running');
  // Files and processes of the resumed sandbox.
  await sbx.files.write('/home/user/from-test.txt', 'hello');
  // A file name chosen by code in the sandbox is shown as text, never made into an element.
  const hostileName = '<img src=x onerror="document.title=`pwned`">.txt';
  await sbx.exec(['bash', '-c', 'touch "/home/user/$1"', '_', hostileName], { check: true });
  const [filesTab] = await page.$$('xpath/.//button[@role="tab" and text()="Files"]');
  await filesTab?.click();
  await page.waitForSelector('a[download="from-test.txt"]');
  assert.ok((await page.$eval('.files tbody', (el) => el.textContent ?? '')).includes(hostileName), 'the hostile name shows as text');
  assert.equal(await page.$$eval('.files img', (els) => els.length), 0);
  assert.notEqual(await page.title(), 'pwned');
  // Download through the link, and upload through the file input into the directory shown.
  const href = await page.$eval('a[download="from-test.txt"]', (a) => (a as HTMLAnchorElement).href);
  assert.equal(await page.evaluate(async (url) => (await fetch(url)).text(), href), 'hello');
  const local = path.join(profile, 'from-browser.txt');
  writeFileSync(local, 'uploaded from the browser\n');
  const input = await page.$('.files input[type=file]');
  assert.ok(input, 'an upload field');
  await input.uploadFile(local);
  await page.waitForSelector('a[download="from-browser.txt"]');
  assert.equal((await sbx.files.read('/home/user/from-browser.txt')).toString(), 'uploaded from the browser\n');
  await shot(page, '06-files');

  // The egress log is live: an attempt made now shows up without a reload.
  const [egressTab] = await page.$$('xpath/.//button[@role="tab" and text()="Egress"]');
  await egressTab?.click();
  await waitForText(page, '[role=tabpanel]', /Nothing has tried to leave/, 'the egress log starts empty');
  // NO_PROXY inside names loopback; --noproxy '' sends this one through the proxy anyway.
  const attempt = await sbx.exec(['curl', '-fsS', '--noproxy', '', '-m', '10', `${d.url}/v1/health`]);
  assert.notEqual(attempt.exitCode, 0, 'the daemon port is not in the sandbox policy');
  await waitForText(page, '[role=tabpanel] tbody', new RegExp(`denied.*127\\.0\\.0\\.1:${new URL(d.url).port}`), 'the denied attempt shows in the egress tab');
  await shot(page, '06b-egress');
  await page.close();
});

test('templates and usage pages render, and the list fits a phone', T, async () => {
  const page = await loggedIn();
  await page.goto(`${d.url}/ui/#/templates`);
  await waitForText(page, 'table tbody tr:first-child td:first-child', /^base$/, 'the templates page lists base');
  await shot(page, '07-templates');
  await page.goto(`${d.url}/ui/#/usage`);
  await page.waitForSelector('canvas');
  await waitForText(page, '#usage-title + p', /vCPU-seconds/, 'the usage totals');
  await shot(page, '08-usage');
  await page.close();
  const phone = await loggedIn(390);
  await phone.waitForSelector(`tr[data-id="${sbx.id}"]`);
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow} px at 390 px`);
  await shot(phone, '09-phone');
  await phone.close();
});

test('templates: versions and build logs, kept for good and failed builds, readable in the page', T, async () => {
  const name = `dashlogs${process.pid}`;
  const marker = 'printed-by-the-dashboard-test';
  // A step never run before, so its layer is not cached and its output is in the log.
  const nonce = randomBytes(6).toString('hex');
  try {
    const info = await Template.buildRecipe(
      { name, from: 'base', steps: [{ type: 'run', cmd: `echo ${marker}-$((6*7)) ${nonce}` }] },
      { ...d.conn, contextDir: tmpdir() },
    );
    await assert.rejects(
      Template.buildRecipe({ name, from: 'base', steps: [{ type: 'run', cmd: 'echo about-to-fail; exit 3' }] }, { ...d.conn, contextDir: tmpdir() }),
      TemplateBuildError,
    );
    const { builds } = await d.http.json<TemplateBuildLogList>('GET', `/v1/templates/${name}/builds`);
    assert.deepEqual(
      builds.map((b) => [b.state, b.version]),
      [
        ['failed', undefined],
        ['ok', info.version],
      ],
    );
    const failedLog = await (await d.http.request('GET', `/v1/templates/${name}/builds/${builds[0]?.id}`)).text();
    assert.match(failedLog, /about-to-fail/);
    assert.match(failedLog, /failed: /);
    const { versions } = await d.http.json<TemplateVersionList>('GET', `/v1/templates/${name}/versions`);
    assert.deepEqual(
      versions.map((v) => [v.version, v.current]),
      [[info.version, true]],
    );
    await assert.rejects(d.http.json('GET', `/v1/templates/${name}/builds/1-nope`), /no build log 1-nope/);

    const page = await loggedIn();
    await page.goto(`${d.url}/ui/#/templates`);
    const open = `xpath/.//tr[td[1][text()="${name}"]]//button`;
    await page.waitForSelector(open);
    await (await page.$(open))?.click();
    await waitForText(page, '.detail', /\(current\)/, 'the versions list marks the current one');
    // The versions and the builds are two requests: wait for both lists.
    await page.waitForFunction(() => document.querySelectorAll('.detail button.link').length >= 2, { timeout: 30_000 });
    const logButtons = await page.$$('.detail button.link');
    assert.equal(logButtons.length, 2, 'one log button per build');
    await logButtons[1]?.click();
    await waitForText(page, '.detail pre.output', new RegExp(`${marker}-42`), 'the good build log shows the step output');
    await shot(page, '10-template-logs');
    await page.close();
  } finally {
    await Template.delete(name, d.conn).catch(() => undefined);
  }
});

/** A raw request with a session cookie and chosen headers, as another page would send it. */
function rawRequest(method: string, route: string, headers: Record<string, string>): Promise<number> {
  return requestStatus(new URL(route, d.url).toString(), method, headers);
}

test('the session cookie is refused from another origin, and without the CSRF token for changes', T, async () => {
  const page = await loggedIn();
  const [cookie] = (await page.browserContext().cookies()).filter((c) => c.name === 'warren_session');
  assert.ok(cookie);
  const jar = `warren_session=${cookie.value}`;
  const host = new URL(d.url).host;
  // The page itself, without the token its calls add: refused.
  const noToken = await page.evaluate(async (id) => (await fetch(`/v1/sandboxes/${id}/hibernate`, { method: 'POST' })).status, sbx.id);
  assert.equal(noToken, 403);
  assert.equal(await rawRequest('GET', '/v1/sandboxes', { cookie: jar, host }), 200, 'the cookie alone reads');
  assert.equal(
    await rawRequest('GET', '/v1/sandboxes', { cookie: jar, host, origin: `http://3000-${sbx.id}.localhost:${new URL(d.url).port}` }),
    403,
    'not from a port URL',
  );
  assert.equal(await rawRequest('POST', `/v1/sandboxes/${sbx.id}/hibernate`, { cookie: jar, host, origin: d.url }), 403, 'no change without the token');
  // A terminal socket from another origin with the cookie: refused before the upgrade.
  const ws = await rawRequest('GET', `/v1/sandboxes/${sbx.id}/pty`, {
    cookie: jar,
    host,
    origin: 'http://evil.example',
    ...WEBSOCKET_UPGRADE_HEADERS,
  });
  assert.equal(ws, 403);
  // Logging out ends the session for every later call.
  await page.evaluate(async () => {
    await fetch('/ui/logout', { method: 'POST' });
  });
  assert.equal(await rawRequest('GET', '/v1/sandboxes', { cookie: jar, host }), 401);
  assert.equal((await Sandbox.connect(sbx.id, d.conn)).info.state, 'running');
  await page.close();
});
