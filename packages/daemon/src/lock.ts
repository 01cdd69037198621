/**
 * One daemon per home. The lock is a listening unix socket: the kernel drops it when the
 * process dies (even on kill -9), and a live owner is detected by connecting to it.
 */
import net from 'node:net';
import { rmSync } from 'node:fs';
import { WarrenError } from '@warren/protocol';

export async function acquireHomeLock(socketPath: string, home: string): Promise<net.Server> {
  const listen = () =>
    new Promise<net.Server>((resolve, reject) => {
      const server = net.createServer((c) => c.end(`${process.pid}\n`));
      server.once('error', reject);
      server.listen(socketPath, () => resolve(server));
    });
  try {
    return await listen();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
  }
  const owner = await new Promise<string | null>((resolve) => {
    const c = net.connect(socketPath);
    let data = '';
    c.on('data', (d) => (data += d.toString()));
    c.on('end', () => resolve(data.trim() || 'unknown'));
    c.on('error', () => resolve(null));
  });
  if (owner !== null) {
    throw new WarrenError('conflict', `another warren daemon (pid ${owner}) is already running with WARREN_HOME=${home}; stop it first or use another --home`);
  }
  rmSync(socketPath, { force: true }); // stale socket from a daemon that died
  return listen();
}
