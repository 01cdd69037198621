// Per-spawn cost of ways a node process (like the guest agent) can start /bin/true.
// Runs inside a sandbox (or on the host for comparison). Plain CommonJS, no dependencies.
// Usage: node spawn.cjs '{"n":100,"warmup":5,"methods":["..."],"uid":1000,"gid":1000,"pidsLimit":1024}'
// Prints {"results":{method:[ms,...]},"errors":{method:"message"}} on stdout.
'use strict';
const cp = require('node:child_process');

const cfg = JSON.parse(process.argv[2] || '{}');
const N = cfg.n || 100;
const WARMUP = cfg.warmup ?? 5;
const LIMIT = cfg.pidsLimit || 1024;
const now = () => Number(process.hrtime.bigint()) / 1e6;

// What the agent passes today (packages/guest/src/processes.ts).
const agentOptions = () => ({
  cwd: '/tmp',
  env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/tmp', USER: 'user', LANG: 'C.UTF-8' },
  ...(cfg.uid !== undefined ? { uid: cfg.uid, gid: cfg.gid } : {}),
  detached: true,
  stdio: ['pipe', 'pipe', 'pipe'],
});
const WRAPPER = ['/bin/sh', '-c', `ulimit -p ${LIMIT}; exec "$@"`, 'warren-exec'];

function closed(child, what) {
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, sig) => (code === 0 ? resolve() : reject(new Error(`${what}: exit ${code} ${sig || ''}`))));
  });
}

function agentSpawn(argv) {
  const c = cp.spawn(argv[0], argv.slice(1), agentOptions());
  c.stdin.end();
  c.stdout.resume();
  c.stderr.resume();
  return closed(c, argv.join(' '));
}

/** A long-lived helper that reads one command per line and answers with its exit status. */
function lineHelper(argv) {
  const c = cp.spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  let buf = '';
  let waiter = null;
  c.stdout.setEncoding('utf8');
  c.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiter;
      waiter = null;
      if (w) w(line);
    }
  });
  return {
    run(cmd) {
      return new Promise((resolve, reject) => {
        waiter = (line) => (line.trim() === '0' ? resolve() : reject(new Error(`helper answered ${line}`)));
        c.stdin.write(`${cmd}\n`);
      });
    },
    close() {
      c.stdin.end();
      return new Promise((r) => c.on('close', r));
    },
  };
}

const PY_HELPER = [
  'import os, sys',
  'while True:',
  '    line = sys.stdin.readline()',
  '    if not line: break',
  '    argv = line.split()',
  '    pid = os.posix_spawn(argv[0], argv, os.environ)',
  '    _, st = os.waitpid(pid, 0)',
  '    sys.stdout.write("%d\\n" % os.waitstatus_to_exitcode(st)); sys.stdout.flush()',
].join('\n');

// Each method: setup?() -> state, then sync(state) or run(state) per spawn, teardown?(state).
const METHODS = {
  'node spawnSync /bin/true': { sync: () => cp.spawnSync('/bin/true', { stdio: 'ignore' }) },
  'node spawn /bin/true (stdio ignore)': {
    run: () => closed(cp.spawn('/bin/true', [], { stdio: 'ignore' }), 'true'),
  },
  'node spawn /bin/true (3 pipes)': {
    run: () => {
      const c = cp.spawn('/bin/true', [], { stdio: ['pipe', 'pipe', 'pipe'] });
      c.stdin.end();
      c.stdout.resume();
      c.stderr.resume();
      return closed(c, 'true');
    },
  },
  'node spawn /bin/true (3 pipes, setsid)': {
    run: () => {
      const c = cp.spawn('/bin/true', [], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      c.stdin.end();
      c.stdout.resume();
      c.stderr.resume();
      return closed(c, 'true');
    },
  },
  'node spawn /bin/true (agent options: pipes, cwd, env, uid/gid, setsid)': { run: () => agentSpawn(['/bin/true']) },
  'node spawn sh-wrapper -> /bin/true (the agent before warren-init, argv)': { run: () => agentSpawn([...WRAPPER, '/bin/true']) },
  'node spawn /bin/bash -c true (agent options)': { run: () => agentSpawn(['/bin/bash', '-c', 'true']) },
  'node spawn sh-wrapper -> bash -c true (the agent before warren-init, cmd)': { run: () => agentSpawn([...WRAPPER, '/bin/bash', '-c', 'true']) },
  // A proposal: the limit set by the bash that runs the command string, no dash hop.
  'node spawn /bin/bash -c "ulimit -u N; true" (agent options)': { run: () => agentSpawn(['/bin/bash', '-c', `ulimit -u ${LIMIT}; true`]) },
  'node spawn /bin/sh -c true (agent options)': { run: () => agentSpawn(['/bin/sh', '-c', 'true']) },
  'helper dash (stdin line -> fork+exec /bin/true)': {
    setup: () => lineHelper(['/bin/sh', '-c', 'while read -r l; do $l; echo $?; done']),
    run: (h) => h.run('/bin/true'),
    teardown: (h) => h.close(),
  },
  'helper bash (stdin line -> fork+exec /bin/true)': {
    setup: () => lineHelper(['/bin/bash', '-c', 'while read -r l; do $l; echo $?; done']),
    run: (h) => h.run('/bin/true'),
    teardown: (h) => h.close(),
  },
  'helper python3 (stdin line -> posix_spawn /bin/true)': {
    setup: () => lineHelper(['python3', '-u', '-c', PY_HELPER]),
    run: (h) => h.run('/bin/true'),
    teardown: (h) => h.close(),
  },
  // Last, alone: grows this process so that fork has a bigger address space to copy.
  'node spawnSync /bin/true from a node with +256 MiB resident': {
    last: true,
    setup: () => {
      const keep = [];
      for (let i = 0; i < 256; i++) keep.push(Buffer.alloc(1 << 20, i)); // touched, so really mapped
      const arrays = [];
      for (let i = 0; i < 200_000; i++) arrays.push({ i, s: 'x'.repeat(16) });
      return { keep, arrays };
    },
    sync: () => cp.spawnSync('/bin/true', { stdio: 'ignore' }),
    teardown: () => undefined,
  },
};

/** Times one call; rejects on a failed spawn. */
async function timeOnce(m, state) {
  const s = now();
  const r = m.sync ? m.sync(state) : m.run(state);
  if (r && typeof r.then === 'function') await r;
  else if (r && r.status !== 0) throw new Error(`status ${r.status} ${r.error || ''}`);
  return now() - s;
}

// Methods run round-robin (one spawn of each per round), so that load from elsewhere on the
// machine, which drifts, hits them all alike. Those marked `last` run afterwards, alone.
async function main() {
  const wanted = cfg.methods?.length ? cfg.methods : Object.keys(METHODS);
  const results = {};
  const errors = {};
  const phases = [wanted.filter((n) => !METHODS[n]?.last), wanted.filter((n) => METHODS[n]?.last)];
  for (const names of phases) {
    const live = [];
    for (const name of names) {
      const m = METHODS[name];
      if (!m) {
        errors[name] = 'unknown method';
        continue;
      }
      try {
        const state = m.setup ? await m.setup() : undefined;
        live.push({ name, m, state });
        results[name] = [];
      } catch (err) {
        errors[name] = String(err?.message || err);
      }
    }
    for (let i = 0; i < WARMUP + N; i++) {
      for (const x of live) {
        if (errors[x.name]) continue;
        try {
          const t = await timeOnce(x.m, x.state);
          if (i >= WARMUP) results[x.name].push(t);
        } catch (err) {
          errors[x.name] = String(err?.message || err);
          delete results[x.name];
        }
      }
    }
    for (const x of live) if (x.m.teardown) await x.m.teardown(x.state);
  }
  process.stdout.write(`${JSON.stringify({ results, errors, methods: Object.keys(METHODS) })}\n`);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${String(err?.stack)}\n`);
    process.exit(1);
  },
);
