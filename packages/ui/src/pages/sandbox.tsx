/** One sandbox: its record and actions, processes with output, a terminal, files, egress, network and ports. */
import { useEffect, useState } from 'preact/hooks';
import type { NetworkPolicy, PortForwardList, ProcessInfo, SandboxInfo } from '@warren/protocol';
import { SandboxActions } from '../actions.js';
import { api } from '../api.js';
import { FileBrowser } from '../files.js';
import { age, bytes, duration, percent, time } from '../format.js';
import { useLive, useNow } from '../live.js';
import { lazy } from '../lazy.js';
import { Alert, TableHead } from '../parts.js';

const TerminalView = lazy(() => import('../terminal.js').then((m) => m.TerminalView));

const TABS = ['Processes', 'Terminal', 'Files', 'Egress', 'Network'] as const;
type Tab = (typeof TABS)[number];

export function SandboxPage({ id }: { id: string }) {
  const live = useLive(id);
  const now = useNow();
  const [tab, setTab] = useState<Tab>('Processes');
  const [gone, setGone] = useState('');
  const s = live.sandboxes.get(id);
  useEffect(() => {
    // Not in the live list: a sandbox of another key, or a mistyped id; ask for the daemon's word.
    if (live.connected && !s) api<SandboxInfo>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`).then(() => setGone(''), (err: Error) => setGone(err.message));
  }, [live.connected, s, id]);
  if (!s) return <p class={gone ? 'error' : 'loading'}>{gone || (live.connected ? `${id} is not listed.` : 'Loading…')}</p>;
  const running = s.state === 'running';
  return (
    <section aria-labelledby="sandbox-title">
      <h1 id="sandbox-title">
        {s.id} <span class={`state ${s.state}`}>{s.state}</span>
      </h1>
      <dl class="facts">
        <dt>Template</dt>
        <dd>
          {s.template} <span class="muted">{s.templateVersion}</span>
        </dd>
        <dt>Started</dt>
        <dd>
          {s.boot}, {age(s.createdAt, now)} ago
        </dd>
        {s.source && (
          <>
            <dt>From</dt>
            <dd>
              <a href={`#/tree/${encodeURIComponent(s.id)}`}>{s.source}</a>
            </dd>
          </>
        )}
        <dt>TTL left</dt>
        <dd>{s.state === 'dead' ? '–' : duration((Date.parse(s.expiresAt) - now) / 1000)}</dd>
        <dt>Resources</dt>
        <dd>
          {s.resources.cpus} vCPU, {s.resources.memoryMB} MB memory, {s.resources.diskMB} MB disk
        </dd>
        <dt>Now</dt>
        <dd>
          CPU {percent(s.cpu)}, memory {bytes(s.memoryBytes)}, disk {bytes(s.diskBytes)}
        </dd>
        {Object.keys(s.metadata).length > 0 && (
          <>
            <dt>Metadata</dt>
            <dd>
              {Object.entries(s.metadata).map(([k, v]) => (
                <span key={k} class="tag">
                  {k}={v}
                </span>
              ))}
            </dd>
          </>
        )}
        {s.error && (
          <>
            <dt>Died</dt>
            <dd class="error">{s.error}</dd>
          </>
        )}
      </dl>
      <SandboxActions sandbox={s} />
      <div role="tablist" aria-label="Sandbox views" class="tabs">
        {TABS.map((t) => (
          <button key={t} type="button" role="tab" aria-selected={tab === t} onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
      </div>
      <div role="tabpanel" aria-label={tab}>
        {!running && tab !== 'Egress' && tab !== 'Network' ? (
          <p class="hint">The sandbox is {s.state}: resume it to see its {tab.toLowerCase()}.</p>
        ) : (
          <>
            {tab === 'Processes' && <Processes sandboxId={id} processes={live.processes} />}
            {tab === 'Terminal' && <TerminalView sandboxId={id} />}
            {tab === 'Files' && <FileBrowser sandboxId={id} />}
          </>
        )}
        {tab === 'Egress' && <Egress live={live} />}
        {tab === 'Network' && <Network sandboxId={id} running={running} />}
      </div>
    </section>
  );
}

function Processes({ sandboxId, processes }: { sandboxId: string; processes: ProcessInfo[] }) {
  const [pid, setPid] = useState<number | undefined>();
  return (
    <div>
      {processes.length === 0 && <p class="empty">No processes started through the API.</p>}
      <table>
        <TableHead columns={['Pid', 'Command', 'State', 'Started', 'Output']} />
        <tbody>
          {processes.map((p) => (
            <tr key={p.pid}>
              <td>{p.pid}</td>
              <td>
                <code>{p.command.join(' ')}</code>
                {p.tag && <span class="tag">{p.tag}</span>}
              </td>
              <td>{p.running ? 'running' : p.signal ? `killed (${p.signal})` : `exit ${p.exitCode}`}</td>
              <td>{time(p.startedAt)}</td>
              <td>
                <button type="button" onClick={() => setPid(p.pid)} aria-pressed={pid === p.pid}>
                  Show
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {pid !== undefined && <ProcessOutput key={pid} sandboxId={sandboxId} pid={pid} />}
    </div>
  );
}

/** A process's output, followed as it is written (NDJSON of the output route). */
function ProcessOutput({ sandboxId, pid }: { sandboxId: string; pid: number }) {
  const [text, setText] = useState('');
  useEffect(() => {
    const abort = new AbortController();
    const url = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/processes/${pid}/output?follow=1`;
    (async () => {
      const res = await fetch(url, { signal: abort.signal });
      if (!res.ok || !res.body) {
        setText(`could not read the output (HTTP ${res.status})`);
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        pending += value;
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) {
          if (!line) continue;
          const e = JSON.parse(line) as { type: string; data?: string; exitCode?: number | null };
          if (e.type === 'stdout' || e.type === 'stderr') setText((t) => (t + (e.data ?? '')).slice(-200_000));
          if (e.type === 'exit') setText((t) => `${t}\n[exit ${e.exitCode}]`);
        }
      }
    })().catch((err: Error) => {
      if (err.name !== 'AbortError') setText((t) => `${t}\n[${err.message}]`);
    });
    return () => abort.abort();
  }, [sandboxId, pid]);
  return (
    <pre class="output" aria-label={`Output of process ${pid}`}>
      {text}
    </pre>
  );
}

function Egress({ live }: { live: ReturnType<typeof useLive> }) {
  return (
    <div class="table-wrap">
      {live.egress.length === 0 && <p class="empty">Nothing has tried to leave this sandbox.</p>}
      <table>
        <TableHead columns={['Time', 'Decision', 'Request', 'Bytes up/down', 'Why']} />
        <tbody>
          {[...live.egress].reverse().map((e) => (
            <tr key={e.id} class={e.decision}>
              <td>{time(e.time)}</td>
              <td>{e.decision}</td>
              <td>
                {e.method ?? ''} {e.host}:{e.port}
                {e.path ?? ''}
              </td>
              <td>
                {bytes(e.bytesUp)} / {bytes(e.bytesDown)}
              </td>
              <td>{e.reason ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Network({ sandboxId, running }: { sandboxId: string; running: boolean }) {
  const base = `/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
  const [policy, setPolicy] = useState<NetworkPolicy | undefined>();
  const [forwards, setForwards] = useState<PortForwardList['forwards']>([]);
  const [port, setPort] = useState('3000');
  const [portUrl, setPortUrl] = useState('');
  const [error, setError] = useState('');
  useEffect(() => {
    api<NetworkPolicy>('GET', `${base}/network`).then(setPolicy, (e: Error) => setError(e.message));
    api<PortForwardList>('GET', `${base}/forwards`).then((r) => setForwards(r.forwards), (e: Error) => setError(e.message));
  }, [base]);
  const makeUrl = async (e: Event) => {
    e.preventDefault();
    setError('');
    try {
      setPortUrl((await api<{ url: string }>('POST', `${base}/ports/${encodeURIComponent(port)}/url`, {})).url);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <div>
      <h2>Egress policy</h2>
      {policy && (policy.allow.length ? <ul>{policy.allow.map((r) => <li key={r}><code>{r}</code></li>)}</ul> : <p>Nothing may leave (deny all).</p>)}
      <h2>Port URLs</h2>
      <form class="inline" onSubmit={(e) => void makeUrl(e)}>
        <label>
          Port
          <input type="number" min={1} max={65535} value={port} onInput={(e) => setPort((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit" disabled={!running}>
          Make URL
        </button>
      </form>
      {portUrl && (
        <p>
          <a href={portUrl} target="_blank" rel="noopener noreferrer">
            {portUrl}
          </a>
        </p>
      )}
      <h2>Forwards to the host</h2>
      {forwards.length ? (
        <ul>
          {forwards.map((f) => (
            <li key={f.port}>
              port {f.port} → {f.host}:{f.hostPort}
            </li>
          ))}
        </ul>
      ) : (
        <p class="empty">None.</p>
      )}
      <Alert text={error} />
    </div>
  );
}
