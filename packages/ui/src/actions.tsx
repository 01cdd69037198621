/** The buttons that act on one sandbox; what happened is told in a status line. */
import { useState } from 'preact/hooks';
import type { ForkResult, LiveSandbox, SnapshotInfo } from '@warren/protocol';
import { api } from './api.js';

export function SandboxActions({ sandbox, compact = false }: { sandbox: LiveSandbox; compact?: boolean }) {
  const [busy, setBusy] = useState('');
  const [message, setMessage] = useState('');
  const path = `/v1/sandboxes/${encodeURIComponent(sandbox.id)}`;
  const run = (label: string, call: () => Promise<string>) => async () => {
    setBusy(label);
    setMessage('');
    try {
      setMessage(await call());
    } catch (err) {
      setMessage(`${label} failed: ${(err as Error).message}`);
    } finally {
      setBusy('');
    }
  };
  const live = sandbox.state === 'running' || sandbox.state === 'hibernated';
  const buttons = [
    sandbox.state === 'running' && {
      label: 'Hibernate',
      call: async () => {
        await api('POST', `${path}/hibernate`);
        return `${sandbox.id} hibernated`;
      },
    },
    sandbox.state === 'hibernated' && {
      label: 'Resume',
      call: async () => {
        await api('POST', `${path}/resume`);
        return `${sandbox.id} resumed`;
      },
    },
    live && {
      label: 'Fork',
      call: async () => {
        const r = await api<ForkResult>('POST', `${path}/fork`, { count: 1 });
        return `forked: ${r.sandboxes.map((s) => s.id).join(', ')}`;
      },
    },
    live && {
      label: 'Snapshot',
      call: async () => {
        const s = await api<SnapshotInfo>('POST', `${path}/snapshots`, {});
        return `snapshot ${s.id} saved`;
      },
    },
    live && {
      label: 'Set TTL',
      call: async () => {
        const answer = window.prompt(`New time to live of ${sandbox.id}, in seconds from now`, '3600');
        if (answer === null) return '';
        await api('POST', `${path}/ttl`, { ttlSeconds: Number(answer) });
        return `TTL of ${sandbox.id} set to ${answer} s`;
      },
    },
    sandbox.state !== 'dead' && {
      label: 'Kill',
      danger: true,
      call: async () => {
        if (!window.confirm(`Kill ${sandbox.id}? Its memory, processes and files are lost.`)) return '';
        await api('DELETE', path);
        return `${sandbox.id} killed`;
      },
    },
  ].filter((b): b is { label: string; call: () => Promise<string>; danger?: boolean } => Boolean(b));
  return (
    <div class={compact ? 'actions compact' : 'actions'}>
      {buttons.map((b) => (
        <button
          key={b.label}
          type="button"
          class={b.danger ? 'danger' : ''}
          disabled={busy !== ''}
          aria-label={`${b.label} ${sandbox.id}`}
          onClick={run(b.label, b.call)}
        >
          {busy === b.label ? `${b.label}…` : b.label}
        </button>
      ))}
      {message && (
        <span class="message" role="status">
          {message}
        </span>
      )}
    </div>
  );
}
