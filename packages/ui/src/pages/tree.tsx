/**
 * The fork tree: every sandbox under the one it was forked from, or under the snapshot it
 * was made from; a parent that is gone still shows, as a greyed node, so siblings stay together.
 */
import { useMemo } from 'preact/hooks';
import type { LiveSandbox } from '@warren/protocol';
import { useLive } from '../live.js';

interface Node {
  id: string;
  sandbox?: LiveSandbox;
  kind: 'sandbox' | 'snapshot' | 'gone';
  children: Node[];
}

function buildForest(sandboxes: Map<string, LiveSandbox>): Node[] {
  const nodes = new Map<string, Node>();
  const node = (id: string, kind: Node['kind']): Node => {
    let n = nodes.get(id);
    if (!n) {
      n = { id, kind, children: [] };
      nodes.set(id, n);
    }
    return n;
  };
  for (const s of sandboxes.values()) Object.assign(node(s.id, 'sandbox'), { kind: 'sandbox', sandbox: s });
  const roots: Node[] = [];
  const sorted = [...sandboxes.values()].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  for (const s of sorted) {
    const self = node(s.id, 'sandbox');
    if (!s.source || s.source === s.id) {
      roots.push(self);
      continue;
    }
    const parentKind = sandboxes.has(s.source) ? 'sandbox' : s.boot === 'snapshot' ? 'snapshot' : 'gone';
    const parent = node(s.source, parentKind);
    parent.children.push(self);
    if (parentKind !== 'sandbox' && !roots.includes(parent)) roots.push(parent);
  }
  return roots;
}

function Branch({ node, focus }: { node: Node; focus: string | undefined }) {
  const s = node.sandbox;
  return (
    <li>
      <span class={`node ${node.kind}${node.id === focus ? ' focus' : ''}`}>
        {node.kind === 'sandbox' && s ? (
          <a href={`#/sandbox/${encodeURIComponent(node.id)}`}>
            {node.id} <span class={`state ${s.state}`}>{s.state}</span> <span class="muted">{s.template}</span>
          </a>
        ) : (
          <span title={node.kind === 'snapshot' ? 'a snapshot' : 'a sandbox no longer listed'}>
            {node.kind === 'snapshot' ? '📷 ' : ''}
            {node.id} <span class="muted">{node.kind === 'snapshot' ? 'snapshot' : 'gone'}</span>
          </span>
        )}
      </span>
      {node.children.length > 0 && (
        <ul>
          {node.children.map((c) => (
            <Branch key={c.id} node={c} focus={focus} />
          ))}
        </ul>
      )}
    </li>
  );
}

export function TreePage({ focus }: { focus?: string | undefined }) {
  const live = useLive();
  const forest = useMemo(() => buildForest(live.sandboxes), [live.sandboxes]);
  // A tree with forks first: lone sandboxes after them.
  const ordered = [...forest.filter((n) => n.children.length), ...forest.filter((n) => !n.children.length)];
  return (
    <section aria-labelledby="tree-title">
      <h1 id="tree-title">Fork tree</h1>
      <p class="hint">Each sandbox sits under the sandbox it was forked from or the snapshot it was made from.</p>
      <ul class="tree" aria-label="Fork tree">
        {ordered.map((n) => (
          <Branch key={n.id} node={n} focus={focus} />
        ))}
      </ul>
      {live.connected && forest.length === 0 && <p class="empty">No sandboxes yet.</p>}
    </section>
  );
}
