/**
 * Point-in-time restore (docs/databases.md): a fresh database sandbox is given the newest
 * base backup taken before the target, the archived WAL from that backup on, and recovery
 * settings (`recovery_target_time`, promote), then PostgreSQL replays up to the target and
 * opens for writes on a new timeline. The sandbox's own server (the template's start) is
 * stopped first; the restored one is started with pg_ctl.
 */
import { createReadStream, existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { WarrenError, type ExecRequest, type ExecResult } from '@warren/protocol';
import { PG_BIN, type WalArchive } from './wal-archive.js';

const DATA = '/var/lib/postgresql/data';
const RESTORE_WAL = '/var/lib/postgresql/restore-wal';
const STAGE = '/var/lib/postgresql/restore-stage';
/** How long replay may take before the restore gives up (seconds). */
const RECOVERY_TIMEOUT_S = 1800;

export interface RestoreTarget {
  sandboxId: string;
  exec: (sandboxId: string, req: ExecRequest) => Promise<ExecResult>;
  /** Writes a host file's bytes to a path in the sandbox as `user`. */
  writeFile: (sandboxId: string, path: string, source: AsyncIterable<Uint8Array>, user: string) => Promise<unknown>;
}

/** Refuses a target the archive cannot reach, naming the window. */
export function checkTarget(archive: Pick<WalArchive, 'window'>, target: number, name: string, now = Date.now()): void {
  const iso = (t: number) => new Date(t).toISOString();
  if (target > now) throw new WarrenError('invalid_argument', `restore time ${iso(target)} is in the future (now is ${iso(now)})`);
  const { from, to } = archive.window();
  if (from === undefined || to === undefined)
    throw new WarrenError('failed_precondition', `database ${name} has no base backup yet: nothing can be restored (the first is taken right after create)`);
  if (target < from || target > to)
    throw new WarrenError('invalid_argument', `restore time ${iso(target)} is outside database ${name}'s restorable window ${iso(from)} .. ${iso(to)}`);
}

export async function restoreInto(archive: WalArchive, target: number, into: RestoreTarget): Promise<void> {
  const base = archive
    .baseBackups()
    .filter((b) => b.finishedAt <= target)
    .at(-1);
  if (!base) throw new WarrenError('failed_precondition', `no base backup finished before ${new Date(target).toISOString()}`);
  const run = async (script: string, what: string, timeoutSeconds = 300) => {
    const r = await into.exec(into.sandboxId, { argv: ['/bin/sh', '-c', script], user: 'postgres', timeoutSeconds });
    if (r.exitCode !== 0) throw new WarrenError('internal', `restore: ${what} failed (exit ${r.exitCode}): ${(r.stderr || r.stdout).trim().slice(-800)}`);
    return r.stdout;
  };
  // A cold-booted sandbox may still be starting its server: stop it only once it answers.
  await run(
    `i=0; until ${PG_BIN}/pg_isready -q -h /tmp; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.2; done; ${PG_BIN}/pg_ctl -D ${DATA} stop -m fast -w -t 60 && rm -rf ${DATA} ${RESTORE_WAL} ${STAGE} && mkdir -m 700 ${DATA} ${RESTORE_WAL} ${STAGE}`,
    'stopping the fresh server',
  );
  for (const file of readdirSync(base.dir).filter((f) => f.endsWith('.tar.gz'))) {
    await into.writeFile(into.sandboxId, `${STAGE}/${file}`, createReadStream(path.join(base.dir, file)), 'postgres');
  }
  // WAL from the backup's start on; the segment being written goes in under its own name
  // (pg_receivewal keeps .partial segments at full size, zero-filled past what it has).
  const wal = readdirSync(archive.walDir)
    .filter((f) => /^[0-9A-F]{24}(\.partial)?$/.test(f))
    .filter((f) => !base.firstSegment || f.slice(0, 24) >= base.firstSegment)
    .sort();
  for (const f of wal) {
    if (!existsSync(path.join(archive.walDir, f))) continue; // pruned meanwhile
    await into.writeFile(into.sandboxId, `${RESTORE_WAL}/${f.slice(0, 24)}`, createReadStream(path.join(archive.walDir, f)), 'postgres');
  }
  // Starts with a newline: the backup's postgresql.auto.conf may not end with one.
  const settings = [
    '',
    `restore_command = 'cp ${RESTORE_WAL}/%f %p'`,
    // PostgreSQL's own timestamp form: it refuses ISO 8601's T and Z here.
    `recovery_target_time = '${new Date(target).toISOString().replace('T', ' ').replace('Z', '+00')}'`,
    `recovery_target_action = 'promote'`,
    '',
  ].join('\n');
  await into.writeFile(into.sandboxId, `${STAGE}/recovery.conf`, Readable.from([Buffer.from(settings)]), 'postgres');
  await run(
    [
      `tar xzf ${STAGE}/base.tar.gz -C ${DATA}`,
      `if [ -f ${STAGE}/pg_wal.tar.gz ]; then tar xzf ${STAGE}/pg_wal.tar.gz -C ${DATA}/pg_wal; fi`,
      `cat ${STAGE}/recovery.conf >> ${DATA}/postgresql.auto.conf`,
      `rm -rf ${STAGE}`,
      `touch ${DATA}/recovery.signal`,
      `chmod 700 ${DATA}`,
    ].join(' && '),
    'placing the base backup and WAL',
  );
  const replayed = await startAndReplay(into);
  if (!replayed.ok) {
    // The target is after the last commit the archive holds (the window reaches to now while
    // the archive streams): replaying everything it has is the state at the target.
    if (!/before configured recovery target was reached/.test(replayed.log))
      throw new WarrenError('internal', `restore: recovery did not finish: ${replayed.log.trim().slice(-800)}`);
    await run(`sed -i '/^recovery_target_time = /d' ${DATA}/postgresql.auto.conf`, 'replaying all archived WAL');
    const again = await startAndReplay(into);
    if (!again.ok) throw new WarrenError('internal', `restore: recovery did not finish: ${again.log.trim().slice(-800)}`);
  }
  // Replay is over: the settings must not apply again at a later start.
  await run(`sed -i '/^restore_command = /d; /^recovery_target_/d' ${DATA}/postgresql.auto.conf && rm -rf ${RESTORE_WAL}`, 'clearing the recovery settings');
}

/** Starts the restored server and waits until replay has ended and it accepts writes; else its log's tail. */
async function startAndReplay(into: RestoreTarget): Promise<{ ok: true } | { ok: false; log: string }> {
  const r = await into.exec(into.sandboxId, {
    argv: [
      '/bin/sh',
      '-c',
      [
        `${PG_BIN}/pg_ctl -D ${DATA} -l /var/lib/postgresql/restore.log start -w -t 60 >/dev/null || exit 4`,
        `i=0; while [ "$(${PG_BIN}/psql -X -Atq -h /tmp -d postgres -c 'select pg_is_in_recovery()' 2>/dev/null)" != f ]; do`,
        `i=$((i+1)); [ $i -gt ${RECOVERY_TIMEOUT_S * 5} ] && exit 3; ${PG_BIN}/pg_isready -q -h /tmp || exit 4; sleep 0.2; done`,
      ].join(' '),
    ],
    user: 'postgres',
    timeoutSeconds: RECOVERY_TIMEOUT_S + 120,
  });
  if (r.exitCode === 0) return { ok: true };
  const log = await into.exec(into.sandboxId, { argv: ['tail', '-n', '8', '/var/lib/postgresql/restore.log'], user: 'postgres' });
  return { ok: false, log: `${r.exitCode === 3 ? 'replay timed out; ' : ''}${log.stdout}` };
}
