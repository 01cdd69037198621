/** Browse a sandbox's files: open directories, download files, upload into the one shown. */
import { useEffect, useState } from 'preact/hooks';
import type { FileStat } from '@warren/protocol';
import { api, upload } from './api.js';
import { bytes, time } from './format.js';
import { Alert, TableHead } from './parts.js';

function parentOf(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i <= 0 ? '/' : trimmed.slice(0, i);
}

export function FileBrowser({ sandboxId, start = '/home/user' }: { sandboxId: string; start?: string }) {
  const [dir, setDir] = useState(start);
  const [entries, setEntries] = useState<FileStat[]>([]);
  const [error, setError] = useState('');
  const [reload, setReload] = useState(0);
  const base = `/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
  useEffect(() => {
    setError('');
    api<{ entries: FileStat[] }>('GET', `${base}/files/list?path=${encodeURIComponent(dir)}`).then(
      (r) => setEntries(r.entries.sort((a, b) => Number(b.type === 'directory') - Number(a.type === 'directory') || a.name.localeCompare(b.name))),
      (err: Error) => {
        setEntries([]);
        setError(err.message);
      },
    );
  }, [base, dir, reload]);
  const onUpload = async (e: Event) => {
    const input = e.target as HTMLInputElement;
    const file = input.files?.[0];
    if (!file) return;
    try {
      await upload(sandboxId, `${dir.replace(/\/+$/, '')}/${file.name}`, file);
      setReload((n) => n + 1);
    } catch (err) {
      setError(`upload failed: ${(err as Error).message}`);
    }
    input.value = '';
  };
  return (
    <div class="files">
      <div class="filebar">
        <button type="button" onClick={() => setDir(parentOf(dir))} disabled={dir === '/'} aria-label="Parent directory">
          ..
        </button>
        <label>
          Path
          <input
            value={dir}
            onKeyDown={(e) => {
              if (e.key === 'Enter') setDir((e.target as HTMLInputElement).value || '/');
            }}
          />
        </label>
        <label class="upload">
          Upload here
          <input type="file" onChange={(e) => void onUpload(e)} />
        </label>
      </div>
      <Alert text={error} />
      <table>
        <TableHead columns={['Name', 'Size', 'Modified', 'Mode']} />
        <tbody>
          {entries.map((f) => (
            <tr key={f.path}>
              <td>
                {f.type === 'directory' ? (
                  <button type="button" class="link" onClick={() => setDir(f.path)}>
                    {f.name}/
                  </button>
                ) : (
                  <a href={`${base}/files?path=${encodeURIComponent(f.path)}`} download={f.name}>
                    {f.name}
                  </a>
                )}
              </td>
              <td>{f.type === 'directory' ? '' : bytes(f.size)}</td>
              <td>{time(f.mtime)}</td>
              <td>{(f.mode & 0o7777).toString(8)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
