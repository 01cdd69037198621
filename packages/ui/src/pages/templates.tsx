/** Templates: their versions, bake state, and warm pools with hit rates and claim latency. */
import { useEffect, useState } from 'preact/hooks';
import type { BakeInfo, PoolInfo, TemplateBuildLogList, TemplateInfo, TemplateList, TemplateVersionList } from '@warren/protocol';
import { api, apiText } from '../api.js';
import { time } from '../format.js';
import { Alert, TableHead } from '../parts.js';

interface Row {
  template: TemplateInfo;
  bake?: BakeInfo;
  pool?: PoolInfo;
}

/** How often the page asks again: templates change at builds, pools at claims. */
const REFRESH_MS = 10_000;

/** A template's versions on disk and its build logs, each log shown on demand. */
function TemplateDetail({ name }: { name: string }) {
  const [versions, setVersions] = useState<TemplateVersionList['versions']>([]);
  const [builds, setBuilds] = useState<TemplateBuildLogList['builds'] | undefined>();
  const [log, setLog] = useState<{ id: string; text: string } | undefined>();
  const [error, setError] = useState('');
  const base = `/v1/templates/${encodeURIComponent(name)}`;
  useEffect(() => {
    api<TemplateVersionList>('GET', `${base}/versions`).then((r) => setVersions(r.versions), (e: Error) => setError(e.message));
    api<TemplateBuildLogList>('GET', `${base}/builds`).then(
      (r) => setBuilds(r.builds),
      (e: Error) => setError(e.message),
    );
  }, [base]);
  const show = async (id: string) => {
    try {
      setLog({ id, text: await apiText(`${base}/builds/${encodeURIComponent(id)}`) });
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <div class="detail">
      <h2>Versions of {name}</h2>
      <ul>
        {versions.map((v) => (
          <li key={v.version}>
            <code>{v.version}</code> {v.builtAt ? `built ${time(v.builtAt)}` : ''} {v.current ? <strong>(current)</strong> : ''}
          </li>
        ))}
      </ul>
      <h2>Builds</h2>
      {builds && builds.length === 0 && <p class="empty">No build of {name} was logged (builds before logs were kept, or another daemon's).</p>}
      <ul>
        {builds?.map((b) => (
          <li key={b.id}>
            {time(b.startedAt)}: {b.state}
            {b.version ? ` (version ${b.version})` : ''}{' '}
            <button type="button" class="link" onClick={() => void show(b.id)} aria-pressed={log?.id === b.id}>
              log
            </button>
          </li>
        ))}
      </ul>
      {log && (
        <pre class="output" aria-label={`Build log ${log.id}`}>
          {log.text}
        </pre>
      )}
      <Alert text={error} />
    </div>
  );
}

export function TemplatesPage() {
  const [open, setOpen] = useState<string | undefined>();
  const [rows, setRows] = useState<Row[] | undefined>();
  const [error, setError] = useState('');
  useEffect(() => {
    let stopped = false;
    const load = async () => {
      try {
        const { templates } = await api<TemplateList>('GET', '/v1/templates');
        const loaded = await Promise.all(
          templates.map(async (t) => {
            const name = encodeURIComponent(t.name);
            const [bake, pool] = await Promise.all([
              api<BakeInfo>('GET', `/v1/templates/${name}/bake`).catch(() => undefined),
              api<PoolInfo>('GET', `/v1/templates/${name}/pool`).catch(() => undefined),
            ]);
            return { template: t, ...(bake ? { bake } : {}), ...(pool ? { pool } : {}) };
          }),
        );
        if (!stopped) setRows(loaded.sort((a, b) => a.template.name.localeCompare(b.template.name)));
      } catch (err) {
        if (!stopped) setError((err as Error).message);
      }
    };
    void load();
    const t = setInterval(load, REFRESH_MS);
    return () => {
      stopped = true;
      clearInterval(t);
    };
  }, []);
  return (
    <section aria-labelledby="templates-title">
      <h1 id="templates-title">Templates</h1>
      <Alert text={error} />
      {!rows && !error && <p class="loading">Loading…</p>}
      <div class="table-wrap">
        <table>
          <TableHead columns={['Template', 'Version', 'Built', 'Bake', 'Pool (ready / size)', 'Hit rate', 'Claim p50 / p95', 'History']} />
          <tbody>
            {rows?.map(({ template: t, bake, pool }) => {
              const claims = pool ? pool.hits + pool.misses : 0;
              return (
                <tr key={t.name}>
                  <td>{t.name}</td>
                  <td>
                    <code>{t.version}</code>
                  </td>
                  <td>{t.builtAt ? time(t.builtAt) : '–'}</td>
                  <td title={bake?.error ?? bake?.reason ?? ''}>
                    {bake ? bake.state : '–'}
                    {bake?.ms !== undefined ? ` (${(bake.ms / 1000).toFixed(1)} s)` : ''}
                  </td>
                  <td>{pool ? `${pool.ready} / ${pool.size}` : '–'}</td>
                  <td>{claims ? `${Math.round((pool!.hits / claims) * 100)}% of ${claims}` : '–'}</td>
                  <td>{pool?.claimMs ? `${pool.claimMs.p50.toFixed(0)} / ${pool.claimMs.p95.toFixed(0)} ms` : '–'}</td>
                  <td>
                    <button type="button" aria-expanded={open === t.name} onClick={() => setOpen(open === t.name ? undefined : t.name)}>
                      Versions and builds
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
      {open && <TemplateDetail key={open} name={open} />}
    </section>
  );
}
