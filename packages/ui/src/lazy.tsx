/**
 * A component whose code loads on first use: the terminal (xterm.js) and the usage charts
 * (Chart.js) are most of the bundle, and the list page needs neither.
 */
import type { ComponentType } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { Alert } from './parts.js';

export function lazy<P extends object>(load: () => Promise<ComponentType<P>>): ComponentType<P> {
  let loaded: ComponentType<P> | undefined;
  return function Lazy(props: P) {
    const [Loaded, setLoaded] = useState<ComponentType<P> | undefined>(() => loaded);
    const [error, setError] = useState('');
    useEffect(() => {
      if (Loaded) return;
      load().then(
        (c) => {
          loaded = c;
          setLoaded(() => c);
        },
        (err: Error) => setError(`could not load this part of the page: ${err.message}`),
      );
    }, [Loaded]);
    if (error) return <Alert text={error} />;
    return Loaded ? <Loaded {...props} /> : <p class="loading">Loading…</p>;
  };
}
