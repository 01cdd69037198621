/**
 * warren guest agent. Runs under warren-init, the sandbox's first process, which starts
 * commands for it (spawner.ts) and reaps orphans. It serves the daemon over framed channels:
 * the sandbox's stdio, plus one channel per connection on AGENT_SOCKET_PATH, which `attach`
 * relays use after a daemon restart.
 *
 *   node agent.js serve    # the agent
 *   node agent.js attach   # relay stdio <-> the running agent's socket
 *   node agent.js connect HOST PORT   # stdio <-> a TCP connection through the egress proxy
 */
import net from 'node:net';
import os from 'node:os';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import {
  AGENT_SOCKET_PATH,
  EGRESS_PROXY_PORT,
  GUEST_PROTOCOL_VERSION,
  dispatchGuestRequest,
  type GuestHandlers,
  type GuestRequest,
} from '@warren/protocol/wire';
import { Channel } from './channel.js';
import { ProcessTable } from './processes.js';
import { Spawner } from './spawner.js';
import * as files from './files.js';
import * as dirs from './dirs.js';
import { Tunnels } from './egress.js';
import { Forwards } from './forwards.js';
import { parseHints } from './connect-hints.js';
import { writeLoopbackNames } from './hosts.js';
import { writeBrowserPolicy } from './browser-policy.js';
import { Terminals } from './terminals.js';
import { streamStdin } from './stdin-stream.js';
import { startWatch } from './watch.js';

function serve(): void {
  const spawner = new Spawner();
  const processes = new ProcessTable(spawner);
  const terminals = new Terminals(spawner, processes);
  // The channel of the daemon's latest conversation: egress tunnels go to that daemon.
  let daemon: Channel | undefined;
  const tunnels = new Tunnels(() => daemon);
  tunnels.listenForEgress();
  const forwards = new Forwards((socket, target) => tunnels.forward(socket, target));

  const handlers: GuestHandlers<{ channel: Channel }> = {
    hello: (_params, { channel }) => {
      daemon = channel;
      return { version: GUEST_PROTOCOL_VERSION, agentPid: process.pid, hostname: os.hostname() };
    },
    ping: () => ({ now: Date.now(), busy: processes.busyCount() + terminals.busyCount() }),
    configure: async (p) => {
      processes.configure(p.env, p.pidsLimit, { user: p.defaultUser, cwd: p.defaultCwd });
      // init sets the hostname while the agent writes /etc/hosts: two processes, no waiting in turn.
      const named = p.hostname && p.hostname !== os.hostname() ? spawner.setHostname(p.hostname) : undefined;
      try {
        writeLoopbackNames(p.hostname ?? os.hostname());
      } catch (err) {
        // The sandbox works without; only names like localhost stay unresolved.
        process.stderr.write(`warren-agent: cannot write the loopback names into /etc/hosts: ${(err as Error).message}\n`);
      }
      try {
        writeBrowserPolicy();
      } catch (err) {
        // Only browsers are affected: without the policy their HTTPS through the proxy is refused.
        process.stderr.write(`warren-agent: cannot write the browser policy that turns off ECH: ${(err as Error).message}\n`);
      }
      await named;
      return {};
    },
    exec: async (p, { channel, stream }) => ({ pid: await processes.start(p, channel, stream) }),
    'proc.list': () => ({ processes: processes.list() }),
    'proc.output': (p) => processes.output(p),
    'proc.subscribe': (p, { channel, stream }) => {
      processes.subscribe(p, channel, stream);
      return { pid: p.pid };
    },
    'proc.stdin': (p) => {
      processes.writeStdin(p);
      return {};
    },
    'proc.signal': async (p) => {
      await processes.signal(p);
      return {};
    },
    'proc.forget': (p) => {
      processes.forget(p);
      return {};
    },
    'file.read': (p, { channel, stream }) => {
      const r = files.read(p, channel, stream);
      r.start(); // data is produced by I/O callbacks, always after this response is sent
      return { size: r.size };
    },
    'file.write': (p, { channel, stream }) => files.write(p, channel, stream),
    'net.connect': (p, { channel, stream }) => tunnels.connect(p.port, channel, stream),
    'dir.read': async (p, { channel, stream }) => {
      (await dirs.read(p, spawner, channel, stream)).start(); // data follows this response, as file.read's
      return {};
    },
    'dir.write': (p, { channel, stream }) => dirs.write(p, spawner, channel, stream),
    'net.forwards': (p) => {
      tunnels.setConnectHints(parseHints(p.connectHints));
      return forwards.apply(p.forwards);
    },
    'fs.stat': (p) => files.stat(p),
    'fs.list': (p) => ({ entries: files.list(p) }),
    'fs.mkdir': (p) => files.mkdir(p),
    'fs.move': (p) => files.move(p),
    'fs.remove': (p) => ({ removed: files.remove(p) }),
    'term.open': (p) => terminals.open(p),
    'term.input': (p) => {
      terminals.input(p);
      return {};
    },
    'term.resize': (p) => {
      terminals.resize(p);
      return {};
    },
    'term.signal': (p) => {
      terminals.signal(p);
      return {};
    },
    'term.kill': async (p) => {
      await terminals.kill(p);
      return {};
    },
    'term.attach': (p, { channel, stream }) => terminals.attach(p, channel, stream),
    'term.list': () => ({ terminals: terminals.list() }),
    'proc.stdinStream': (p, { channel, stream }) => streamStdin(processes.openStdin(p.pid), p, channel, stream),
    'fs.watch': (p, { channel, stream }) => startWatch(p, channel, stream),
  };
  const handle = (req: GuestRequest, channel: Channel): Promise<unknown> => dispatchGuestRequest(handlers, req, { channel });

  // The daemon may vanish (restart); losing stdio must not end the agent or its processes.
  process.on('SIGPIPE', () => undefined);
  new Channel(process.stdin, process.stdout, handle);

  mkdirSync(path.dirname(AGENT_SOCKET_PATH), { recursive: true, mode: 0o700 });
  rmSync(AGENT_SOCKET_PATH, { force: true });
  net
    .createServer((socket) => {
      const channel = new Channel(socket, socket, handle);
      channel.onClose(() => socket.destroy());
    })
    .listen(AGENT_SOCKET_PATH);
}

function attach(): void {
  const socket = net.connect(AGENT_SOCKET_PATH);
  socket.on('error', (err) => {
    process.stderr.write(`warren-agent attach: ${err.message}\n`);
    process.exit(1);
  });
  process.stdin.pipe(socket);
  socket.pipe(process.stdout);
  socket.on('close', () => process.exit(0));
  process.stdin.on('end', () => process.exit(0));
}

/**
 * `connect HOST PORT`: a TCP connection through the egress proxy on stdin and stdout, for
 * clients that speak TCP but not HTTP proxies (ssh's ProxyCommand, git over ssh, nc-style
 * pipes). The daemon's proxy applies the sandbox's policy to HOST:PORT as for any CONNECT.
 */
function connect(host: string | undefined, port: string | undefined): void {
  if (!host || !port || !/^\d{1,5}$/.test(port)) {
    process.stderr.write('usage: connect HOST PORT\n');
    process.exit(2);
  }
  const target = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  const socket = net.connect({ host: '127.0.0.1', port: EGRESS_PROXY_PORT, noDelay: true }, () => {
    socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  });
  socket.on('error', (err) => {
    process.stderr.write(`connect: ${err.message}\n`);
    process.exit(1);
  });
  let head = Buffer.alloc(0);
  const onHead = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    socket.off('data', onHead);
    const status = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
    if (!/^HTTP\/1\.[01] 200 /.test(status)) {
      process.stderr.write(
        `connect: the egress proxy refused ${target}: ${
          head
            .subarray(end + 4)
            .toString('utf8')
            .trim() || status
        }\n`,
      );
      process.exit(1);
    }
    const rest = head.subarray(end + 4);
    if (rest.length) process.stdout.write(rest);
    socket.pipe(process.stdout);
    process.stdin.pipe(socket);
  };
  socket.on('data', onHead);
  socket.on('end', () => process.stdout.end());
  // Not process.exit(): output still buffered for stdout (a pipe) would be lost. With the
  // connection gone and stdin let go, node ends once stdout is flushed.
  socket.on('close', () => {
    process.stdin.unpipe(socket);
    process.stdin.destroy();
  });
}

const mode = process.argv[2] ?? 'serve';
if (mode === 'attach') attach();
else if (mode === 'connect') connect(process.argv[3], process.argv[4]);
else serve();
