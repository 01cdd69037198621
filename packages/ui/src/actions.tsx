/** What can be done to a sandbox, as plain functions, and the buttons of one sandbox's page. */
import { useState } from 'preact/hooks';
import type { ForkResult, LiveSandbox, SnapshotInfo } from '@warren/protocol';
import { api } from './api.js';

export type Action = 'hibernate' | 'resume' | 'fork' | 'snapshot' | 'ttl' | 'kill';

const ACTION_LABELS: Record<Action, string> = {
  hibernate: 'Hibernate',
  resume: 'Resume',
  fork: 'Fork',
  snapshot: 'Snapshot',
  ttl: 'Set TTL',
  kill: 'Kill',
};

/** The actions that apply to a sandbox in its state, in the order they are shown. */
function actionsFor(s: LiveSandbox): Action[] {
  const live = s.state === 'running' || s.state === 'hibernated';
  const out: Action[] = [];
  if (s.state === 'running') out.push('hibernate');
  if (s.state === 'hibernated') out.push('resume');
  if (live) out.push('fork', 'snapshot', 'ttl');
  if (s.state !== 'dead') out.push('kill');
  return out;
}

/** Runs an action (asking first where it is destructive); the sentence says what happened, '' if cancelled. */
async function runAction(action: Action, id: string): Promise<string> {
  const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
  switch (action) {
    case 'hibernate':
      await api('POST', `${path}/hibernate`);
      return `${id} hibernated`;
    case 'resume':
      await api('POST', `${path}/resume`);
      return `${id} resumed`;
    case 'fork': {
      const r = await api<ForkResult>('POST', `${path}/fork`, { count: 1 });
      return `${id} forked: ${r.sandboxes.map((s) => s.id).join(', ')}`;
    }
    case 'snapshot': {
      const s = await api<SnapshotInfo>('POST', `${path}/snapshots`, {});
      return `snapshot ${s.id} of ${id} saved`;
    }
    case 'ttl': {
      const answer = window.prompt(`New time to live of ${id}, in seconds from now`, '3600');
      if (answer === null) return '';
      await api('POST', `${path}/ttl`, { ttlSeconds: Number(answer) });
      return `TTL of ${id} set to ${answer} s`;
    }
    case 'kill':
      if (!window.confirm(`Kill ${id}? Its memory, processes and files are lost.`)) return '';
      await api('DELETE', path);
      return `${id} killed`;
  }
}

/**
 * Runs actions one at a time per sandbox and reports each outcome; `busy` names the sandbox
 * and action under way.
 */
export function useActions(): {
  busy: { id: string; action: Action } | undefined;
  message: string;
  act: (action: Action, id: string) => Promise<void>;
} {
  const [busy, setBusy] = useState<{ id: string; action: Action } | undefined>();
  const [message, setMessage] = useState('');
  const act = async (action: Action, id: string) => {
    setBusy({ id, action });
    setMessage('');
    try {
      setMessage(await runAction(action, id));
    } catch (err) {
      setMessage(`${ACTION_LABELS[action]} of ${id} failed: ${(err as Error).message}`);
    } finally {
      setBusy(undefined);
    }
  };
  return { busy, message, act };
}

/** Buttons for each action, marked with data-action and data-id for a delegated click handler. */
export function ActionButtons({ sandbox, busy }: { sandbox: LiveSandbox; busy: Action | undefined }) {
  return (
    <>
      {actionsFor(sandbox).map((a) => (
        <button
          key={a}
          type="button"
          class={a === 'kill' ? 'danger' : ''}
          data-action={a}
          data-id={sandbox.id}
          disabled={busy !== undefined}
          aria-label={`${ACTION_LABELS[a]} ${sandbox.id}`}
        >
          {busy === a ? `${ACTION_LABELS[a]}…` : ACTION_LABELS[a]}
        </button>
      ))}
    </>
  );
}

/** The action of a click on one of ActionButtons' buttons, if it was one. */
export function clickedAction(e: Event): { action: Action; id: string } | undefined {
  const button = (e.target as HTMLElement).closest<HTMLButtonElement>('button[data-action]');
  if (!button || button.disabled) return undefined;
  return { action: button.dataset.action as Action, id: button.dataset.id ?? '' };
}

/** One sandbox's buttons with their status line (the sandbox page). */
export function SandboxActions({ sandbox }: { sandbox: LiveSandbox }) {
  const { busy, message, act } = useActions();
  return (
    <div
      class="actions"
      onClick={(e) => {
        const hit = clickedAction(e);
        if (hit) void act(hit.action, hit.id);
      }}
    >
      <ActionButtons sandbox={sandbox} busy={busy?.action} />
      {message && (
        <span class="message" role="status">
          {message}
        </span>
      )}
    </div>
  );
}
