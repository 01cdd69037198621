/** `warren ui`: open the dashboard in a browser, logged in by a one-time link. */
import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import { dashboardLoginLink } from '@warren/sdk';

/** How long the desktop's opener may take before it counts as having started a browser. */
const OPENER_WAIT_MS = 3000;

/**
 * Starts the desktop's URL opener. True when it exited 0, or is still running after a few
 * seconds (some run the browser itself); false when there is none or it failed (a server
 * without a desktop).
 */
function openInBrowser(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn('xdg-open', [url], { stdio: 'ignore', detached: true });
    const timer = setTimeout(() => {
      child.unref();
      resolve(true);
    }, OPENER_WAIT_MS);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      resolve(ok);
    };
    child.on('error', () => done(false));
    child.on('exit', (code) => done(code === 0));
  });
}

export function registerUiCommand(program: Command): void {
  program
    .command('ui')
    .description('open the dashboard in a browser, logged in as this API key by a link that works once within a minute')
    .option('--url', 'print the login link instead of opening a browser')
    .action(async (opts: { url?: boolean }) => {
      const link = await dashboardLoginLink();
      if (opts.url) {
        process.stdout.write(`${link.url}\n`);
        return;
      }
      const opened = await openInBrowser(link.url);
      // The link is printed either way: the browser may be on another machine than this shell.
      process.stderr.write(
        opened
          ? 'opened the dashboard in your browser; if it did not open, this link logs a browser in once within a minute:\n'
          : 'no browser to open here (xdg-open failed or is missing); this link logs a browser in once within a minute:\n',
      );
      process.stdout.write(`${link.url}\n`);
    });
}
