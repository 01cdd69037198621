/**
 * The dashboard (docs/dashboard.md) in Debian's chromium, driven by puppeteer-core:
 *
 * - Page load to interactive with `--n dashboardrows=500` sandboxes listed: a daemon home is
 *   seeded with that many hibernated records through the daemon's own registry (as the
 *   density suite does; hundreds of running sandboxes would measure the host, not the page),
 *   plus one running sandbox. Timed from navigation until the list holds every sandbox (its
 *   row count) with the first screenful of rows drawn (the list draws only the rows on
 *   screen), and the page answers a filter; against the login page of the same bundle (no
 *   data, no stream) in the same browser and run.
 * - The daemon's CPU while 5 dashboards show that list and sit idle, against the same
 *   daemon with none open (utime+stime from /proc over the same window).
 * - A keystroke's echo in the browser terminal (xterm.js over the PTY WebSocket), from the
 *   key press until the character is on the page, against the same echo through the SDK's
 *   WebSocket terminal in the same run.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import type { UiLoginLink } from '@warren/protocol';
import type { Context } from '../context.js';
import { fmt } from '../stats.js';
import { seed, startOwnDaemon } from './density.js';
import { terminalEchoes } from './terminal.js';

const SUITE = 'dashboard';
const CHROMIUM = '/usr/bin/chromium';
const IDLE_PAGES = 5;
const IDLE_WINDOW_MS = 20_000;
const CLOCK_TICKS = 100;

/** utime+stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

async function cpuShare(pid: number, windowMs: number): Promise<number> {
  const before = cpuSeconds(pid);
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  return ((cpuSeconds(pid) - before) / (windowMs / 1000)) * 100;
}

export async function runDashboard(ctx: Context): Promise<void> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run \`bash scripts/setup.sh\` (it installs Debian's chromium)`);
  const rows = ctx.iters.dashboardrows;
  const n = ctx.iters.dashboard;
  const { d } = await startOwnDaemon(ctx, `daemon with ${rows} hibernated records`, (home) => seed(home, rows));
  const sbx = await d.create();
  ctx.defer('kill the dashboard bench sandbox', () => sbx.kill());
  const profile = mkdtempSync(path.join(tmpdir(), 'warren-bench-chromium-'));
  const browser: Browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  ctx.defer('close chromium', async () => {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  });
  const listed = rows + 1;

  /** A fresh browser context logged in by a login link (the session cookie is per context). */
  const loggedInPage = async (): Promise<Page> => {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    const link = await d.http.json<UiLoginLink>('POST', '/v1/ui/login-links');
    await page.goto(link.url, { waitUntil: 'domcontentloaded' });
    return page;
  };
  /** Every row is in the list (its count) and the first screenful is on the page; then a filter must answer. */
  const untilListed = (page: Page, rowsWanted: number) =>
    page.waitForFunction(
      (want) =>
        document.querySelector('table.sandboxes tbody')?.getAttribute('aria-rowcount') === String(want) &&
        document.querySelectorAll('table.sandboxes tbody tr[data-id]').length >= Math.min(want, 20),
      { polling: 'mutation', timeout: 60_000 },
      rowsWanted,
    );
  const untilInteractive = async (page: Page, rowsWanted: number) => {
    await untilListed(page, rowsWanted);
    // Interactive: a filter answers (the state select hides every row but the running one).
    await page.select('.filters select', 'running');
    await page.waitForFunction(() => document.querySelectorAll('table.sandboxes tbody tr[data-id]').length === 1, { polling: 'mutation', timeout: 60_000 });
  };

  // Page load: the list with every row, against the login page (same bundle, no session).
  const listMs: number[] = [];
  const loginMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const anon = await (await browser.createBrowserContext()).newPage();
    let t = performance.now();
    await anon.goto(`${d.url}/ui/`, { waitUntil: 'domcontentloaded' });
    await anon.waitForSelector('input#key');
    loginMs.push(performance.now() - t);
    await anon.browserContext().close();

    const page = await loggedInPage();
    await page.goto('about:blank');
    t = performance.now();
    await page.goto(`${d.url}/ui/`, { waitUntil: 'domcontentloaded' });
    await untilInteractive(page, listed);
    listMs.push(performance.now() - t);
    await page.browserContext().close();
  }

  // Idle CPU: the daemon with no dashboard, then with 5 showing the whole list.
  const noneCpu = await cpuShare(d.pid, IDLE_WINDOW_MS);
  const pages: Page[] = [];
  for (let i = 0; i < IDLE_PAGES; i++) {
    const page = await loggedInPage();
    await untilListed(page, listed);
    pages.push(page);
  }
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const openCpu = await cpuShare(d.pid, IDLE_WINDOW_MS);
  for (const page of pages) await page.browserContext().close();

  // Keystroke echo: in the browser terminal, against the SDK's terminal on the same sandbox.
  const page = await loggedInPage();
  await page.goto(`${d.url}/ui/#/sandbox/${sbx.id}`);
  await page.waitForSelector('[role=tab]');
  const [tab] = await page.$$('xpath/.//button[@role="tab" and text()="Terminal"]');
  if (!tab) throw new Error('the sandbox page has no Terminal tab');
  await tab.click();
  await page.waitForFunction(() => /connected/.test(document.querySelector('.terminal [role=status]')?.textContent ?? ''), { timeout: 30_000 });
  await page.click('.xterm-box');
  // `cat` echoes nothing of its own until a newline; the pty's echo is what shows.
  await page.keyboard.type('cat\n');
  await new Promise((resolve) => setTimeout(resolve, 500));
  // Timed inside the page: from the key's keydown event to the character in the terminal's
  // rows (xterm.js draws on the next animation frame), so DevTools' own latency is left out.
  await page.evaluate(() => {
    const w = window as unknown as { echoMs: number[] };
    w.echoMs = [];
    const rows = document.querySelector('.xterm-rows');
    if (!rows) throw new Error('no terminal rows');
    let pending: { key: string; count: number; t: number } | undefined;
    document.addEventListener(
      'keydown',
      (e) => {
        pending = { key: e.key, count: (rows.textContent ?? '').split(e.key).length, t: performance.now() };
      },
      true,
    );
    new MutationObserver(() => {
      if (pending && (rows.textContent ?? '').split(pending.key).length > pending.count) {
        w.echoMs.push(performance.now() - pending.t);
        pending = undefined;
      }
    }).observe(rows, { subtree: true, childList: true, characterData: true });
  });
  const keys = 'abcdefghijklmnopqrstuvwxyz';
  const presses = ctx.iters.terminal / 4 + 5;
  for (let i = 0; i < presses; i++) {
    await page.keyboard.press(keys[i % keys.length] as 'a');
    await page.waitForFunction((want) => (window as unknown as { echoMs: number[] }).echoMs.length >= want, { timeout: 10_000 }, i + 1);
    // A new line now and then keeps the row short, so the page's text stays small.
    if (i % 20 === 19) {
      await page.keyboard.press('Enter');
      await new Promise((resolve) => setTimeout(resolve, 100));
      await page.evaluate(() => undefined);
    }
  }
  const browserEcho = (await page.evaluate(() => (window as unknown as { echoMs: number[] }).echoMs)).slice(5);
  await page.browserContext().close();

  const sdkEcho = await terminalEchoes(sbx, browserEcho.length, 5);

  const r = ctx.report;
  r.add({ key: 'ui-login-load', suite: SUITE, label: 'login page load (same bundle, no data)', unit: 'ms', values: loginMs, isBaseline: true });
  r.add({
    key: 'ui-list-load',
    suite: SUITE,
    label: `sandboxes page: navigation → ${listed} listed, first screen drawn, a filter applied`,
    unit: 'ms',
    values: listMs,
    baseline: 'ui-login-load',
    note: `${rows} hibernated records seeded through the registry and 1 running sandbox`,
  });
  r.add({ key: 'ui-sdk-echo', suite: SUITE, label: 'keystroke echo: SDK terminal (WebSocket from node)', unit: 'ms', values: sdkEcho, isBaseline: true });
  r.add({
    key: 'ui-browser-echo',
    suite: SUITE,
    label: 'keystroke echo: browser terminal (keydown → character in the page)',
    unit: 'ms',
    values: browserEcho,
    baseline: 'ui-sdk-echo',
    note: 'timed in the page: keydown event to the character in xterm.js rows (which draw on the next animation frame)',
  });
  r.note(
    `dashboard: daemon CPU over ${IDLE_WINDOW_MS / 1000} s: ${fmt(noneCpu)}% of a core with no dashboard open, ${fmt(openCpu)}% with ${IDLE_PAGES} dashboards idle on the ${listed}-row list`,
  );
  r.target(`page load with ${rows} sandboxes listed p50 ≤ 1 s`, r.p50('ui-list-load') <= 1000, `p50 ${fmt(r.p50('ui-list-load'))} ms`);
  r.target(
    `daemon CPU with ${IDLE_PAGES} idle dashboards ≤ 1% of a core`,
    openCpu <= 1,
    `${fmt(openCpu)}% (${fmt(noneCpu)}% with none open, same daemon, same window)`,
  );
}
