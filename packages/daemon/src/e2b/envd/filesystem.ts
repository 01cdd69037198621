/**
 * envd's Filesystem service (Connect RPC) on warren's file operations, which the sandbox's
 * agent does as the calling user without following links out of its reach (docs/security.md).
 */
import type { ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import path from 'node:path/posix';
import type { Logger } from 'pino';
import { WarrenError, type FileStat, type WatchEvent } from '@warren/protocol';
import { EventType, FileType, type EntryInfoSchema, type Filesystem, type FilesystemEventSchema, type WatchDirResponseSchema } from '@warren/protocol/e2b';
import type { FileService } from '../../core/files.js';
import type { OpenWatch, WatchService } from '../../core/watch.js';
import { newId } from '../../core/ids.js';
import { toConnectError } from '../errors.js';
import { callOf, resolvePath, unaryHandler, type EnvdCall } from './call.js';
import { EventQueue, keepaliveMs, type OpenStreams } from './queue.js';

export interface FilesystemDeps {
  files: FileService;
  watches: WatchService;
  streams: OpenStreams;
  log: Logger;
}

type Entry = MessageInitShape<typeof EntryInfoSchema>;
type FsEvent = MessageInitShape<typeof FilesystemEventSchema>;

const TYPE: Record<FileStat['type'], FileType> = {
  file: FileType.FILE,
  directory: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.UNSPECIFIED,
};
const EVENT: Record<'create' | 'write' | 'remove' | 'rename', EventType> = {
  create: EventType.CREATE,
  write: EventType.WRITE,
  remove: EventType.REMOVE,
  rename: EventType.RENAME,
};
/** Uploads land in a temporary file of this name beside the target (guest files.ts). */
const UPLOAD_TEMP_PREFIX = '.warren-upload-';
/** Events a polling watcher keeps between two GetWatcherEvents; older ones are dropped. */
const MAX_POLLED_EVENTS = 10_000;
/** Polling watchers one sandbox may hold open (each is a watch in its agent). */
const MAX_POLLING_WATCHERS = 64;

/** `ls -l`'s permission string of a mode (envd's `permissions`). */
function permissions(type: FileStat['type'], mode: number): string {
  const kind = type === 'directory' ? 'd' : type === 'symlink' ? 'L' : '-';
  let out = kind;
  for (let shift = 6; shift >= 0; shift -= 3) {
    const bits = (mode >> shift) & 7;
    out += `${bits & 4 ? 'r' : '-'}${bits & 2 ? 'w' : '-'}${bits & 1 ? 'x' : '-'}`;
  }
  return out;
}

/** The names of the two accounts every warren template has; others by number. */
const accountName = (id: number) => (id === 0 ? 'root' : id === 1000 ? 'user' : String(id));

function entryOf(st: FileStat): Entry {
  return {
    name: st.name,
    type: TYPE[st.type],
    path: st.path,
    size: BigInt(st.size),
    mode: st.mode & 0o7777,
    permissions: permissions(st.type, st.mode),
    owner: accountName(st.uid),
    group: accountName(st.gid),
    modifiedTime: timestampFromMs(Date.parse(st.mtime)),
  };
}

/**
 * A change as envd names it, its path relative to the watched directory. warren's agent
 * reports a file written in place or renamed into place as one `create`; envd reports its
 * creation and its write, and callers wait for the WRITE, so a file's `create` is both.
 */
function eventsOf(root: string, ev: WatchEvent): FsEvent[] {
  if (ev.type !== 'create' && ev.type !== 'write' && ev.type !== 'remove' && ev.type !== 'rename') return [];
  const name = ev.path.startsWith(`${root}/`) ? ev.path.slice(root.length + 1) : ev.path;
  // The temporary file an upload is written to before it is renamed into place.
  if (path.basename(name).startsWith(UPLOAD_TEMP_PREFIX)) return [];
  const uploaded = ev.type === 'rename' && ev.oldPath !== undefined && path.basename(ev.oldPath).startsWith(UPLOAD_TEMP_PREFIX);
  if ((ev.type === 'create' || uploaded) && !ev.isDir) {
    return [
      { name, type: EventType.CREATE },
      { name, type: EventType.WRITE },
    ];
  }
  return [{ name, type: EVENT[ev.type] }];
}

interface PollingWatcher {
  sandboxId: string;
  watch: OpenWatch;
  events: FsEvent[];
  failure?: WarrenError;
  untrack: () => void;
}

export function filesystemService(deps: FilesystemDeps): ServiceImpl<typeof Filesystem> {
  const { files, watches, streams, log } = deps;
  const pollers = new Map<string, PollingWatcher>();

  const unary = unaryHandler(log);

  const openDirWatch = async (call: EnvdCall, p: string, recursive: boolean): Promise<OpenWatch> => {
    const watch = await watches.open(call.sandboxId, resolvePath(call, p), { recursive, user: call.user });
    if (!watch.isDir) {
      watch.close();
      throw new WarrenError('invalid_argument', `path ${watch.path} is not a directory`);
    }
    return watch;
  };

  const pollerOf = (call: EnvdCall, watcherId: string): PollingWatcher => {
    const w = pollers.get(watcherId);
    if (!w || w.sandboxId !== call.sandboxId) throw new WarrenError('not_found', `no watcher ${watcherId}`);
    return w;
  };

  return {
    stat: unary('stat', async (call, req) => ({ entry: entryOf(await files.stat(call.sandboxId, resolvePath(call, req.path), call.user)) })),

    makeDir: unary('make dir', async (call, req) => {
      const target = resolvePath(call, req.path);
      const existing = await files.stat(call.sandboxId, target, call.user).catch((err: unknown) => {
        if (err instanceof WarrenError && err.code === 'not_found') return undefined;
        throw err;
      });
      // envd answers AlreadyExists, which the SDK's makeDir turns into `false`.
      if (existing) throw new WarrenError('conflict', `${target} already exists`);
      return { entry: entryOf(await files.mkdir(call.sandboxId, target, call.user)) };
    }),

    move: unary('move', async (call, req) => ({
      entry: entryOf(await files.move(call.sandboxId, resolvePath(call, req.source), resolvePath(call, req.destination), call.user)),
    })),

    listDir: unary('list dir', async (call, req) => {
      const entries = await files.list(call.sandboxId, resolvePath(call, req.path), req.depth || 1, call.user);
      return { entries: entries.map(entryOf) };
    }),

    // As envd: removing what is not there is no error.
    remove: unary('remove', async (call, req) => {
      await files.remove(call.sandboxId, resolvePath(call, req.path), call.user);
      return {};
    }),

    async *watchDir(req, ctx) {
      let watch: OpenWatch | undefined;
      let untrack: (() => void) | undefined;
      try {
        const call = callOf(ctx.requestHeader);
        watch = await openDirWatch(call, req.path, req.recursive);
        const root = watch.path;
        const q = new EventQueue<MessageInitShape<typeof WatchDirResponseSchema>>();
        untrack = streams.track(call.sandboxId, () => {
          watch?.close();
          q.end();
        });
        q.push({ event: { case: 'start', value: {} } });
        void (async () => {
          for await (const ev of (watch as OpenWatch).events) {
            if (ev.type === 'error') return q.end(new WarrenError('not_found', ev.message));
            for (const fsEvent of eventsOf(root, ev)) q.push({ event: { case: 'filesystem', value: fsEvent } });
          }
          q.end();
        })().catch((err: unknown) => q.end(err));
        yield* q.drain(ctx.signal, { everyMs: keepaliveMs(ctx.requestHeader), item: () => ({ event: { case: 'keepalive', value: {} } }) });
      } catch (err) {
        throw toConnectError(err, log, 'watch dir');
      } finally {
        untrack?.();
        watch?.close();
      }
    },

    createWatcher: unary('create watcher', async (call, req) => {
      const held = [...pollers.values()].filter((w) => w.sandboxId === call.sandboxId).length;
      if (held >= MAX_POLLING_WATCHERS) throw new WarrenError('resource_exhausted', `at most ${MAX_POLLING_WATCHERS} watchers per sandbox; remove some first`);
      const watch = await openDirWatch(call, req.path, req.recursive);
      const watcherId = newId('watch');
      // A pause ends it like any stream; the next poll then says it is gone.
      const untrack = streams.track(call.sandboxId, () => {
        watch.close();
        w.failure ??= new WarrenError('not_found', `watcher ${watcherId} ended when the sandbox paused`);
      });
      const w: PollingWatcher = { sandboxId: call.sandboxId, watch, events: [], untrack };
      pollers.set(watcherId, w);
      void (async () => {
        for await (const ev of watch.events) {
          if (ev.type === 'error') {
            w.failure = new WarrenError('not_found', ev.message);
            return;
          }
          for (const fsEvent of eventsOf(watch.path, ev)) if (w.events.push(fsEvent) > MAX_POLLED_EVENTS) w.events.shift();
        }
      })();
      return { watcherId };
    }),

    getWatcherEvents: unary('watcher events', async (call, req) => {
      const w = pollerOf(call, req.watcherId);
      const events = w.events.splice(0);
      if (!events.length && w.failure) {
        pollers.delete(req.watcherId);
        w.untrack();
        throw w.failure;
      }
      return { events };
    }),

    removeWatcher: unary('remove watcher', async (call, req) => {
      const w = pollerOf(call, req.watcherId);
      w.watch.close();
      w.untrack();
      pollers.delete(req.watcherId);
      return {};
    }),
  };
}
