/** `warren pool` and `warren bake`: what makes creates of a template fast. */
import type { Command } from 'commander';
import { bake, getPool, setPoolSize, type BakeInfo, type PoolInfo } from '@warren/sdk';
import { nonNegativeInt, printJson, safe } from './output.js';

function poolText(p: PoolInfo): string {
  const claims = p.claimMs ? `claim p50 ${p.claimMs.p50.toFixed(1)} ms, p99 ${p.claimMs.p99.toFixed(1)} ms (${p.claimMs.count})` : 'no claims yet';
  const lines = [
    `${safe(p.template)}: size ${p.size}, ready ${p.ready}, booting ${p.booting}`,
    `hits ${p.hits}, misses ${p.misses}, reclaimed ${p.reclaimed}, boot failures ${p.bootFailures}; ${claims}`,
  ];
  if (p.lastError) lines.push(`last boot error: ${safe(p.lastError)}`);
  return `${lines.join('\n')}\n`;
}

function bakeText(b: BakeInfo): string {
  const head = `${safe(b.template ?? '')} ${safe(b.version ?? '')}: ${safe(b.state)}`;
  if (b.state === 'ready') return `${head} (baked ${safe(b.bakedAt ?? '')} in ${((b.ms ?? 0) / 1000).toFixed(1)}s)\n`;
  if (b.state === 'failed') return `${head}: ${safe(b.error ?? '')}\ncreates of this template boot cold\n`;
  return `${head}${b.reason ? ` (${safe(b.reason)})` : ''}\n`;
}

export function registerWarmCommands(program: Command): void {
  program
    .command('pool')
    .description("show a template's warm pool, or set its size with --size (0 turns it off)")
    .argument('<template>')
    .option('--size <n>', 'number of ready sandboxes to keep', nonNegativeInt('--size'))
    .option('--json', 'print JSON')
    .action(async (template: string, opts: { size?: number; json?: boolean }) => {
      const info = opts.size === undefined ? await getPool(template) : await setPoolSize(template, opts.size);
      if (opts.json) printJson(info);
      else process.stdout.write(poolText(info));
    });

  program
    .command('bake')
    .description('bake a template now: boot it, run its start command, wait until ready, checkpoint')
    .argument('<template>')
    .option('--json', 'print JSON')
    .action(async (template: string, opts: { json?: boolean }) => {
      if (!opts.json) process.stderr.write(`baking ${safe(template)} (boot, start command, ready check, checkpoint)...\n`);
      const info = await bake(template);
      if (opts.json) printJson(info);
      else process.stdout.write(bakeText(info));
      if (info.state === 'failed') process.exitCode = 1;
    });
}
