/** `warren template build|ls|rm`: recipes from JSON files, live build progress. */
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { Template, TemplateBuildError, type Recipe, type TemplateBuildEvent, type TemplateInfo } from '@warren/sdk';
import { printJson, safe, table } from './output.js';

/** Prints build events as `[3/7] apt install jq (cached)` lines, step output indented. */
export function progressPrinter(out: NodeJS.WritableStream = process.stdout): (e: TemplateBuildEvent) => void {
  return (e) => {
    switch (e.type) {
      case 'step':
        out.write(`[${e.step}/${e.total}] ${safe(e.description)}${e.cached ? ' (cached)' : ''}\n`);
        break;
      case 'log':
        // A step's output is a sandbox's: shown, but never obeyed by the terminal.
        out.write(`    ${safe(e.line, { keepTabs: true })}\n`);
        break;
      case 'step_done':
        if (!e.cached) out.write(`    done in ${seconds(e.elapsedMs)}\n`);
        break;
      case 'done':
        out.write(`built ${safe(e.template.name)} version ${safe(e.template.version)} in ${seconds(e.elapsedMs)}\n`);
        break;
      default:
        break;
    }
  };
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

/** The file itself, or a directory's recipe.json (as `docker build DIR` finds its Dockerfile). */
function recipePath(file: string): string {
  const abs = path.resolve(file);
  return statSync(abs, { throwIfNoEntry: false })?.isDirectory() ? path.join(abs, 'recipe.json') : abs;
}

function readRecipe(file: string, name?: string): { recipe: Recipe; contextDir: string } {
  const abs = recipePath(file);
  let recipe: Recipe;
  try {
    recipe = JSON.parse(readFileSync(abs, 'utf8')) as Recipe;
  } catch (err) {
    throw new Error(`cannot read recipe ${abs}: ${(err as Error).message}`);
  }
  if (name) recipe = { ...recipe, name };
  return { recipe, contextDir: path.dirname(abs) };
}

export function registerTemplateCommands(program: Command): void {
  const template = program.command('template').description('build, list and remove templates');

  template
    .command('build')
    .description('build a template from a recipe JSON file (its directory is the build context)')
    .argument('<recipe>', 'path to a recipe JSON file, or to a directory holding recipe.json')
    .option('--name <name>', "template name (default: the recipe's name)")
    .option('--local', 'build in this process, without a daemon (as root; uses $WARREN_HOME)')
    .action(async (file: string, opts: { name?: string; local?: boolean }) => {
      const { recipe, contextDir } = readRecipe(file, opts.name);
      const print = progressPrinter();
      try {
        if (opts.local) await buildLocal(recipe, contextDir, print);
        else await Template.buildRecipe(recipe, { contextDir, onEvent: print });
      } catch (err) {
        // The step's output was already printed live; say which step failed and how.
        if (err instanceof TemplateBuildError || (err as { details?: unknown }).details) {
          process.stderr.write(`warren: build failed: ${safe((err as Error).message)}\n`);
          process.exit(1);
        }
        throw err;
      }
    });

  template
    .command('ls')
    .description('list installed templates')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const list = await Template.list();
      if (opts.json) printJson(list);
      else process.stdout.write(templateRows(list));
    });

  template
    .command('rm')
    .description('remove a template (refused while a sandbox uses it)')
    .argument('<names...>')
    .action(async (names: string[]) => {
      for (const name of names) {
        await Template.delete(name);
        process.stdout.write(`${safe(name)}\n`);
      }
    });

  template
    .command('prune')
    .description('remove cached build layers that no template version was built from (refused while a build runs)')
    .option('--all', 'remove every cached layer: the next build of any recipe runs all its steps')
    .option('--json', 'print JSON')
    .action(async (opts: { all?: boolean; json?: boolean }) => {
      const r = await Template.pruneLayers({ all: opts.all ?? false });
      if (opts.json) return printJson(r);
      process.stdout.write(
        `removed ${r.removed} cached ${r.removed === 1 ? 'layer' : 'layers'}, ${(r.freedBytes / 1e6).toFixed(1)} MB freed; kept ${r.kept} that template versions were built from\n`,
      );
    });
}

async function buildLocal(recipe: Recipe, contextDir: string, print: (e: TemplateBuildEvent) => void): Promise<void> {
  const { buildTemplateLocally } = await import('@warren/daemon');
  const abort = new AbortController();
  // Ctrl-C cancels the step and cleans up (mounts, build container) before exiting.
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const started = Date.now();
  try {
    const info = await buildTemplateLocally({ ...recipe, contextDir }, { emit: print, signal: abort.signal });
    print({ type: 'done', template: info, elapsedMs: Date.now() - started });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

function templateRows(list: TemplateInfo[]): string {
  const rows = [['NAME', 'VERSION', 'FROM', 'BUILT', 'START', 'NETWORK']];
  for (const t of list) {
    // NETWORK: the default egress policy of its sandboxes ('-': none; 'none': an explicit empty one).
    const network = t.network ? t.network.allow.join(',') || 'none' : '-';
    rows.push([t.name, t.version, t.from ?? '-', (t.builtAt ?? '-').replace('T', ' ').slice(0, 19), t.start?.cmd ?? '-', network]);
  }
  return table(rows);
}
