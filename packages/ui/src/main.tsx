/** The dashboard's shell: session, navigation and the page of the current #/route. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { UiSessionInfo } from '@warren/protocol';
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { loadSession, logout } from './api.js';
import { LoginPage } from './pages/login.js';
import { SandboxesPage } from './pages/sandboxes.js';
import { TreePage } from './pages/tree.js';
import { SandboxPage } from './pages/sandbox.js';
import { TemplatesPage } from './pages/templates.js';
import { lazy } from './lazy.js';

const UsagePage = lazy(() => import('./pages/usage.js').then((m) => m.UsagePage));

function useRoute(): string[] {
  const read = () => window.location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    window.addEventListener('hashchange', on);
    // The hash may have changed between the first render and this listener.
    on();
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

const NAV: [string, string][] = [
  ['', 'Sandboxes'],
  ['tree', 'Fork tree'],
  ['templates', 'Templates'],
  ['usage', 'Usage'],
];

function App() {
  const [session, setSession] = useState<UiSessionInfo | null | undefined>(undefined);
  const route = useRoute();
  // A failed check (the daemon down) shows the login form, whose submit says what is wrong.
  const refresh = () =>
    void loadSession().then(
      (s) => setSession(s ?? null),
      () => setSession(null),
    );
  useEffect(refresh, []);
  if (session === undefined) return <p class="loading">Loading…</p>;
  if (session === null) return <LoginPage onLogin={refresh} />;
  const [page = '', arg] = route;
  return (
    <>
      <header>
        <a class="brand" href="#/">
          warren
        </a>
        <nav aria-label="Pages">
          {NAV.map(([path, label]) => (
            <a key={path} href={`#/${path}`} aria-current={page === path || (page === 'sandbox' && path === '') ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who" title={session.scopes.join(', ')}>
          {session.keyId}
          {session.admin ? ' (admin)' : ''}
        </span>
        <button type="button" onClick={() => void logout().finally(() => setSession(null))}>
          Log out
        </button>
      </header>
      <main>
        {page === '' && <SandboxesPage />}
        {page === 'tree' && <TreePage focus={arg} />}
        {page === 'sandbox' && arg && <SandboxPage id={arg} />}
        {page === 'templates' && <TemplatesPage />}
        {page === 'usage' && <UsagePage admin={session.admin} />}
        {!['', 'tree', 'sandbox', 'templates', 'usage'].includes(page) && <p>No page {page}.</p>}
      </main>
    </>
  );
}

const root = document.getElementById('app');
if (root) render(<App />, root);
