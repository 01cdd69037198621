/** Shown without a session: a key form, and why a login link did not work. */
import { useState } from 'preact/hooks';
import { login } from '../api.js';
import { Alert } from '../parts.js';

export function LoginPage({ onLogin }: { onLogin: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState('');
  const expired = new URLSearchParams(window.location.search).get('login') === 'expired';
  const submit = async (e: Event) => {
    e.preventDefault();
    setError('');
    try {
      await login(key.trim());
      window.history.replaceState(null, '', '/ui/');
      onLogin();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <main class="login">
      <h1>warren</h1>
      {expired && <p class="error">That login link has expired or was already used. Run <code>warren ui</code> for a new one.</p>}
      <form onSubmit={(e) => void submit(e)}>
        <label for="key">API key</label>
        <input id="key" type="password" autocomplete="off" value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} required />
        <button type="submit">Log in</button>
      </form>
      <Alert text={error} />
      <p class="hint">
        Or run <code>warren ui</code> on the daemon's host: it opens a one-time login link.
      </p>
    </main>
  );
}
