/**
 * The one live stream (GET /v1/events): the sandbox list, kept up to date by the daemon's
 * `changed` events, and the open sandbox's processes and egress log.
 */
import { useEffect, useState } from 'preact/hooks';
import type { EgressEntry, LiveEvent, LiveSandbox, ProcessInfo } from '@warren/protocol';

export interface LiveState {
  connected: boolean;
  /** The daemon's word when reading what changed failed; cleared by the next update. */
  failure: string;
  sandboxes: Map<string, LiveSandbox>;
  processes: ProcessInfo[];
  egress: EgressEntry[];
}

const MAX_EGRESS_SHOWN = 500;

/** Follows the stream while the component is mounted; `sandboxId` adds that sandbox's detail. */
export function useLive(sandboxId?: string): LiveState {
  const [state, setState] = useState<LiveState>({ connected: false, failure: '', sandboxes: new Map(), processes: [], egress: [] });
  useEffect(() => {
    const url = sandboxId ? `/v1/events?sandbox=${encodeURIComponent(sandboxId)}` : '/v1/events';
    const source = new EventSource(url);
    const on = (type: LiveEvent['type'], apply: (e: never, s: LiveState) => LiveState) =>
      source.addEventListener(type, (msg) => {
        const e = JSON.parse((msg as MessageEvent<string>).data) as never;
        setState((s) => apply(e, s));
      });
    // Sent first on each (re)connection, before that connection's egress backlog.
    on('sandboxes', (e: Extract<LiveEvent, { type: 'sandboxes' }>, s) => ({
      ...s,
      connected: true,
      egress: [],
      sandboxes: new Map(e.sandboxes.map((r) => [r.id, r])),
    }));
    on('changed', (e: Extract<LiveEvent, { type: 'changed' }>, s) => {
      const next = new Map(s.sandboxes);
      for (const r of e.sandboxes) next.set(r.id, r);
      for (const id of e.removed) next.delete(id);
      return { ...s, failure: '', sandboxes: next };
    });
    on('failure', (e: Extract<LiveEvent, { type: 'failure' }>, s) => ({ ...s, failure: e.message }));
    on('processes', (e: Extract<LiveEvent, { type: 'processes' }>, s) => ({ ...s, processes: e.processes }));
    on('egress', (e: Extract<LiveEvent, { type: 'egress' }>, s) => ({ ...s, egress: [...s.egress, ...e.entries].slice(-MAX_EGRESS_SHOWN) }));
    source.onerror = () => setState((s) => ({ ...s, connected: false }));
    return () => source.close();
  }, [sandboxId]);
  return state;
}

/** The current time, ticking every `everyMs` (ages and TTLs count on without the server). */
export function useNow(everyMs = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(t);
  }, [everyMs]);
  return now;
}
