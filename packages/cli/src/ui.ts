/** `warren ui`: open the dashboard in a browser, logged in by a one-time link. */
import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import { dashboardLoginLink } from '@warren/sdk';

/** Starts the desktop's URL opener; false when there is none (a server without a desktop). */
function openInBrowser(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn('xdg-open', [url], { stdio: 'ignore', detached: true });
    child.on('error', () => resolve(false));
    child.on('exit', (code) => resolve(code === 0));
    child.unref();
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
      if (await openInBrowser(link.url)) {
        process.stderr.write(`opened the dashboard in your browser (the link works once, until ${link.expiresAt})\n`);
        return;
      }
      process.stderr.write(`no browser to open here (xdg-open); open this link within a minute, once:\n`);
      process.stdout.write(`${link.url}\n`);
    });
}
