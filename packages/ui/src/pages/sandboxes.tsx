/** Every sandbox the key sees, live: filter by state and metadata, search by id, act on each. */
import { Component } from 'preact';
import { useMemo, useRef, useState } from 'preact/hooks';
import type { LiveSandbox, SandboxState } from '@warren/protocol';
import { ActionButtons, clickedAction, useActions, type Action } from '../actions.js';
import { age, bytes, duration, percent } from '../format.js';
import { useLive, useNow } from '../live.js';
import { useRowWindow } from '../window.js';
import { Alert, TableHead } from '../parts.js';

/** Ages and TTLs in the list move on this often (the sandbox page counts every second). */
const LIST_CLOCK_MS = 5_000;

interface RowProps {
  s: LiveSandbox;
  now: number;
  busy: Action | undefined;
}

/**
 * One sandbox's row. It renders again only when its sandbox, the list's clock or its busy
 * action changes: a `changed` event with one row in it redraws one row, not five hundred.
 */
class Row extends Component<RowProps> {
  override shouldComponentUpdate(next: RowProps): boolean {
    return next.s !== this.props.s || next.now !== this.props.now || next.busy !== this.props.busy;
  }

  override render({ s, now, busy }: RowProps) {
    return (
      <tr data-id={s.id}>
        <td>
          <a href={`#/sandbox/${encodeURIComponent(s.id)}`}>{s.id}</a>
        </td>
        <td>
          <span class={`state ${s.state}`}>{s.state}</span>
        </td>
        <td>{s.template}</td>
        <td class="metadata" title={Object.entries(s.metadata).map(([k, v]) => `${k}=${v}`).join('  ')}>
          {Object.entries(s.metadata).map(([k, v]) => (
            <span key={k} class="tag">
              {k}={v}
            </span>
          ))}
        </td>
        <td>{age(s.createdAt, now)}</td>
        <td>{s.state === 'dead' ? '–' : duration((Date.parse(s.expiresAt) - now) / 1000)}</td>
        <td>{percent(s.cpu)}</td>
        <td>{bytes(s.memoryBytes)}</td>
        <td>{bytes(s.diskBytes)}</td>
        <td class="actions compact">
          <ActionButtons sandbox={s} busy={busy} />
        </td>
      </tr>
    );
  }
}

/** The protocol's states (its runtime values would bring zod into the page's bundle). */
const STATES: readonly SandboxState[] = ['creating', 'running', 'hibernating', 'hibernated', 'dead'];

/** "key=value" pairs, separated by spaces or commas; a term without "=" matches a key. */
function metadataMatches(s: LiveSandbox, filter: string): boolean {
  return filter
    .split(/[\s,]+/)
    .filter(Boolean)
    .every((term) => {
      const eq = term.indexOf('=');
      if (eq < 0) return term in s.metadata;
      return s.metadata[term.slice(0, eq)] === term.slice(eq + 1);
    });
}

export function SandboxesPage() {
  const live = useLive();
  const now = useNow(LIST_CLOCK_MS);
  const { busy, message, act } = useActions();
  const [state, setState] = useState('');
  const [metadata, setMetadata] = useState('');
  const [search, setSearch] = useState('');
  const rows = useMemo(
    () =>
      [...live.sandboxes.values()]
        .filter((s) => (!state || s.state === state) && (!search || s.id.includes(search.trim())) && metadataMatches(s, metadata))
        .sort((a, b) => b.createdAt.localeCompare(a.createdAt)),
    [live.sandboxes, state, metadata, search],
  );
  const body = useRef<HTMLTableSectionElement>(null);
  const win = useRowWindow(body, rows.length);
  return (
    <section aria-labelledby="sandboxes-title">
      <h1 id="sandboxes-title">
        Sandboxes <span class="count">{rows.length === live.sandboxes.size ? rows.length : `${rows.length} of ${live.sandboxes.size}`}</span>
        {!live.connected && <span class="offline"> (reconnecting…)</span>}
      </h1>
      <Alert text={live.failure && `Live updates failed: ${live.failure}`} />
      <div class="filters">
        <label>
          State
          <select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Metadata
          <input placeholder="key=value" value={metadata} onInput={(e) => setMetadata((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Id
          <input type="search" placeholder="sb-…" value={search} onInput={(e) => setSearch((e.target as HTMLInputElement).value)} />
        </label>
      </div>
      <p class="message" role="status">
        {message}
      </p>
      <div class="table-wrap">
        <table class="sandboxes">
          {/* Fixed widths: the browser lays the table out from these, not by measuring every row. */}
          <colgroup>
            <col class="c-id" />
            <col class="c-state" />
            <col class="c-template" />
            <col class="c-metadata" />
            <col class="c-age" />
            <col class="c-ttl" />
            <col class="c-cpu" />
            <col class="c-mem" />
            <col class="c-disk" />
            <col class="c-actions" />
          </colgroup>
          <TableHead columns={['Id', 'State', 'Template', 'Metadata', 'Age', 'TTL left', 'CPU', 'Memory', 'Disk', 'Actions']} />
          <tbody
            ref={body}
            aria-rowcount={rows.length}
            onClick={(e) => {
              const hit = clickedAction(e);
              if (hit) void act(hit.action, hit.id);
            }}
          >
            {win.start > 0 && <tr class="spacer" aria-hidden="true" style={{ height: `${win.start * win.rowHeight}px` }} />}
            {rows.slice(win.start, win.end).map((s) => (
              <Row key={s.id} s={s} now={now} busy={busy?.id === s.id ? busy.action : undefined} />
            ))}
            {win.end < rows.length && <tr class="spacer" aria-hidden="true" style={{ height: `${(rows.length - win.end) * win.rowHeight}px` }} />}
          </tbody>
        </table>
      </div>
      {live.connected && rows.length === 0 && <p class="empty">No sandboxes{live.sandboxes.size ? ' match these filters' : ' yet'}.</p>}
    </section>
  );
}
