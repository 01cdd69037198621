/**
 * The logs of template builds (docs/templates.md, "Build logs"): what a build printed, step by
 * step, kept as text per template under `<templates>/.build-logs/NAME/`, the newest
 * MAX_LOGS_PER_TEMPLATE of them. A log's file name says how the build ended:
 * `ID.running.log`, then `ID.ok-VERSION.log` or `ID.failed.log`; a build cut short by a
 * daemon crash stays `running` until the next start marks it failed.
 */
import { createWriteStream, existsSync, openSync, mkdirSync, readdirSync, renameSync, rmSync, type WriteStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { WarrenError, type TemplateBuildEvent, type TemplateBuildLog } from '@warren/protocol';

/** Builds whose logs each template keeps. */
const MAX_LOGS_PER_TEMPLATE = 20;
/** A log stops growing here (a build that prints gigabytes must not fill the disk). */
const MAX_LOG_BYTES = 4 * 1024 * 1024;
const LOG_NAME = /^(\d{13}-[0-9a-f]{6})\.(running|failed|ok-([0-9a-f]+))\.log$/;

export interface BuildRecording {
  /** Writes an event of the build as lines of text. */
  write(event: TemplateBuildEvent): void;
  /** Ends the log: `version` for a build that made one, undefined for a failed one. */
  finish(version: string | undefined): Promise<void>;
}

export class BuildLogs {
  constructor(private readonly dir: string) {}

  /** A log for a build of `name` starting now. */
  start(name: string): BuildRecording {
    const dir = path.join(this.dir, name);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const id = `${Date.now()}-${Math.floor(Math.random() * 0xffffff)
      .toString(16)
      .padStart(6, '0')}`;
    const running = path.join(dir, `${id}.running.log`);
    // Opened here, not by the stream in the background: the file exists before any rename.
    const out: WriteStream = createWriteStream('', { fd: openSync(running, 'wx', 0o600) });
    let written = 0;
    let truncated = false;
    const line = (text: string) => {
      if (truncated) return;
      if (written + text.length > MAX_LOG_BYTES) {
        truncated = true;
        out.write(`[log truncated at ${MAX_LOG_BYTES} bytes]\n`);
        return;
      }
      written += text.length + 1;
      out.write(`${text}\n`);
    };
    return {
      write: (e) => {
        for (const text of eventLines(e)) line(text);
      },
      finish: async (version) => {
        await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
        renameSync(running, path.join(dir, `${id}.${version ? `ok-${version}` : 'failed'}.log`));
        this.trim(dir);
      },
    };
  }

  /** The template's builds, newest first. */
  list(name: string): TemplateBuildLog[] {
    const dir = path.join(this.dir, name);
    if (!existsSync(dir)) return [];
    const logs: TemplateBuildLog[] = [];
    for (const file of readdirSync(dir)) {
      const m = LOG_NAME.exec(file);
      if (!m) continue;
      const [, id = '', state = ''] = m;
      logs.push({
        id,
        startedAt: new Date(Number(id.slice(0, 13))).toISOString(),
        state: state === 'running' || state === 'failed' ? state : 'ok',
        ...(m[3] ? { version: m[3] } : {}),
      });
    }
    return logs.sort((a, b) => b.id.localeCompare(a.id));
  }

  /** One build's log as text. */
  async read(name: string, id: string): Promise<{ text: string; bytes: number }> {
    const found = this.list(name).find((l) => l.id === id);
    if (!found) throw new WarrenError('not_found', `template '${name}' has no build log ${id}; see GET /v1/templates/${name}/builds`);
    const file = path.join(this.dir, name, `${id}.${found.state === 'ok' ? `ok-${found.version}` : found.state}.log`);
    const [text, st] = await Promise.all([readFile(file, 'utf8'), stat(file)]);
    return { text, bytes: st.size };
  }

  /** Marks logs of builds a crash cut short as failed (at start, before any build runs). */
  recover(): void {
    if (!existsSync(this.dir)) return;
    for (const name of readdirSync(this.dir)) {
      const dir = path.join(this.dir, name);
      for (const file of readdirSync(dir)) {
        if (file.endsWith('.running.log')) renameSync(path.join(dir, file), path.join(dir, file.replace('.running.log', '.failed.log')));
      }
    }
  }

  /** Drops a removed template's logs. */
  remove(name: string): void {
    rmSync(path.join(this.dir, name), { recursive: true, force: true });
  }

  private trim(dir: string): void {
    const files = readdirSync(dir)
      .filter((f) => LOG_NAME.test(f))
      .sort();
    for (const old of files.slice(0, Math.max(0, files.length - MAX_LOGS_PER_TEMPLATE))) rmSync(path.join(dir, old), { force: true });
  }
}

/** An event as the lines a terminal would show (as `warren template build` prints it). */
function eventLines(e: TemplateBuildEvent): string[] {
  switch (e.type) {
    case 'step':
      return [`[${e.step}/${e.total}] ${e.description}${e.cached ? ' (cached)' : ''}`];
    case 'log':
      return [e.stream === 'stderr' ? `! ${e.line}` : `  ${e.line}`];
    case 'step_done':
      return e.cached ? [] : [`  done in ${(e.elapsedMs / 1000).toFixed(1)} s`];
    case 'done':
      return [`built ${e.template.name} version ${e.template.version} in ${(e.elapsedMs / 1000).toFixed(1)} s`];
    case 'error':
      return [`failed: ${e.message}`, ...(e.output ? e.output.split('\n').map((l) => `  ${l}`) : [])];
    case 'keepalive':
      return [];
  }
}
