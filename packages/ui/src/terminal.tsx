/** A terminal in the sandbox: xterm.js over the daemon's PTY WebSocket, with the session cookie. */
import { useEffect, useRef, useState } from 'preact/hooks';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import type { TerminalServerMessage } from '@warren/protocol';

/** The protocol's TERMINAL_SUBPROTOCOL (a runtime import of the package would bring zod along). */
const SUBPROTOCOL = 'warren.terminal.v1';

export function TerminalView({ sandboxId }: { sandboxId: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState('connecting…');
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false, screenReaderMode: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el);
    fit.fit();
    const scheme = window.location.protocol === 'https:' ? 'wss' : 'ws';
    const url = `${scheme}://${window.location.host}/v1/sandboxes/${encodeURIComponent(sandboxId)}/pty?cols=${term.cols}&rows=${term.rows}`;
    const ws = new WebSocket(url, [SUBPROTOCOL]);
    ws.binaryType = 'arraybuffer';
    const encoder = new TextEncoder();
    ws.onmessage = (msg) => {
      if (typeof msg.data !== 'string') {
        term.write(new Uint8Array(msg.data as ArrayBuffer));
        return;
      }
      const m = JSON.parse(msg.data) as TerminalServerMessage;
      if (m.type === 'ready') setStatus(`connected (${m.terminalId})`);
      else if (m.type === 'exit') setStatus(`exited with ${m.exitCode}`);
      else setStatus(`error: ${m.message}`);
    };
    ws.onclose = (e) => setStatus((s) => (s.startsWith('exited') ? s : `closed${e.reason ? `: ${e.reason}` : ''}`));
    ws.onerror = () => setStatus('could not connect');
    const input = term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
    });
    const resize = term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
    });
    const onWindow = () => fit.fit();
    window.addEventListener('resize', onWindow);
    term.focus();
    return () => {
      window.removeEventListener('resize', onWindow);
      input.dispose();
      resize.dispose();
      ws.close();
      term.dispose();
    };
  }, [sandboxId]);
  return (
    <div class="terminal">
      <p class="muted" role="status" aria-label="Terminal status">
        Terminal: {status}
      </p>
      <div ref={box} class="xterm-box" aria-label="Terminal" />
    </div>
  );
}
