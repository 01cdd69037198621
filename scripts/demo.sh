#!/usr/bin/env bash
# A short tour: create a sandbox, run commands, move a file and a directory in and out, pipe
# stdin to a command, open a terminal, remove it; then a
# template with a running server: build it, bake it, and create from a warm pool; then the
# whole machine: fork a running sandbox into copies, hibernate one and wake it with a call;
# egress, a workspace whose database is branched with each fork, and a second API key.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
w=./bin/warren

# A daemon with default settings bakes base in the background as it starts and then fills a
# warm pool of it (docs/fast-creates.md); on a daemon that just started, give it a moment
# (bounded: a create before then simply boots cold).
if $w pool base --json | grep -q '"size": 0'; then
  $w bake base >/dev/null 2>&1 || true # waits for the bake (or says why there is none)
else
  for _ in $(seq 1 60); do
    $w pool base --json | grep -q '"ready": [1-9]' && break
    sleep 0.5
  done
fi
log "create a sandbox"
start=$(date +%s%N)
id=$($w create --metadata demo=quickstart --ttl 600)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
trap '$w rm "$id" >/dev/null 2>&1 || true' EXIT
echo "  $id: $($w info "$id" | sed -n 's/^boot *//p'), in $ms ms (including the CLI's own start-up)"

log "run commands (its own kernel: gVisor)"
$w exec "$id" -- bash -c 'echo "hello from $(hostname) as $(whoami)"; uname -sr; node -v; python3 -V'

log "write a file in, edit it inside, read it back"
tmp=$(mktemp)
echo "print('computed inside:', sum(range(10)))" >"$tmp"
$w cp "$tmp" "$id:/home/user/hello.py"
$w exec "$id" -- python3 hello.py
$w exec "$id" -- bash -c 'echo "# edited in the sandbox" >> hello.py'
$w cp "$id:/home/user/hello.py" - | tail -1
rm -f "$tmp"

log "a command that exits non-zero passes its exit code through"
set +e
$w exec "$id" -- bash -c 'echo failing >&2; exit 3'
echo "  exit code: $?"
set -e

log "a directory tree in and back out (cp -r keeps modes, symlinks and times); stdin piped to a command (exec -i)"
tree=$(mktemp -d)
mkdir -p "$tree/proj/src" && echo 'print("from the tree")' >"$tree/proj/src/main.py"
printf '#!/bin/sh\necho "built $(ls src | wc -l) file(s) in $(pwd)"\n' >"$tree/proj/build.sh" && chmod 755 "$tree/proj/build.sh"
ln -s src/main.py "$tree/proj/main.py"
$w cp -r "$tree/proj" "$id:/home/user/proj"
$w exec "$id" --cwd /home/user/proj -- ./build.sh
printf 'one\ntwo\nthree\n' | $w exec -i "$id" -- wc -l
$w cp -r "$id:/home/user/proj" "$tree/back"
diff -r --no-dereference "$tree/proj" "$tree/back" && echo "  round trip: identical"
rm -rf "$tree"

log "a terminal (warren shell: interactive on a TTY; here its keystrokes come from a pipe)"
set +e
printf 'echo "on $(tty), $(stty size) cells"; exit 4\n' | $w shell "$id" -- bash --norc -i 2>&1 | tr -d '\r' | grep -o 'on /dev/pts.*cells'
echo "  exit code of the shell: ${PIPESTATUS[1]}"
set -e

log "list, then remove"
$w ls
$w rm "$id"
trap - EXIT

log "build a template whose start command runs an HTTP server (cached after the first time)"
$w template build templates/node-dev/recipe.json
log "bake it: boot once, start the server, wait until it answers, checkpoint"
$w bake node-dev
log "every create now restores the running server (same process, its own copy of memory)"
web=$($w create --template node-dev --ttl 600)
trap '$w rm "$web" >/dev/null 2>&1 || true' EXIT
$w exec "$web" -- curl -s http://127.0.0.1:3000/
echo
$w info "$web" --json | grep -E '"(boot|templateVersion)"'
$w rm "$web"
trap - EXIT

log "a warm pool of 1: the next create only claims a ready sandbox"
$w pool node-dev --size 1 >/dev/null
for _ in $(seq 60); do
  [ "$($w pool node-dev --json | grep -o '"ready": [0-9]*' | grep -o '[0-9]*$')" = 1 ] && break
  sleep 1
done
start=$(date +%s%N)
web=$($w create --template node-dev --ttl 600)
trap '$w rm "$web" >/dev/null 2>&1 || true' EXIT
echo "  $web created in $(( ($(date +%s%N) - start) / 1000000 )) ms (including the CLI's own start-up)"
$w pool node-dev
$w pool node-dev --size 0 >/dev/null

log "fork it into 2 copies from this instant: the server's counter goes on from the same value in each"
$w exec "$web" -- curl -s http://127.0.0.1:3000/
echo
kids=$($w fork "$web" --count 2 | tr '\n' ' ')
trap '$w rm "$web" $kids >/dev/null 2>&1 || true' EXIT
for k in $kids; do echo "  $k: $($w exec "$k" -- curl -s http://127.0.0.1:3000/)"; done
echo "  parent: $($w exec "$web" -- curl -s http://127.0.0.1:3000/)"

log "hibernate one: memory, processes and files go to disk, no host process is left"
$w hibernate "$web"
$w info "$web" | grep -E '^(state|disk)'
log "any call resumes it where it was"
$w exec "$web" -- curl -s http://127.0.0.1:3000/
echo
$w info "$web" | grep -E '^state'
$w rm "$web" $kids >/dev/null
trap - EXIT

log "egress: a sandbox reaches nothing by default; an allow rule opens one host through the daemon's proxy"
# A server on this machine's loopback stands in for a package registry.
tmp_port=$(mktemp)
node -e "const s = require('http').createServer((q, r) => r.end('hello from the host, via the egress proxy\n')); s.listen(0, '127.0.0.1', () => console.log(s.address().port))" >"$tmp_port" &
server=$!
for _ in $(seq 50); do [ -s "$tmp_port" ] && break; sleep 0.1; done
port=$(cat "$tmp_port")
net=$($w create --ttl 600)
trap '$w rm "$net" >/dev/null 2>&1 || true; kill $server 2>/dev/null || true; rm -f "$tmp_port"' EXIT
echo "  without a rule (refused by the proxy, nothing is sent):"
$w exec "$net" -- curl -sS --noproxy '' --max-time 10 "http://127.0.0.1:$port/" 2>&1 | sed 's/^/    /' || true
$w net "$net" --allow "127.0.0.1:$port" | sed 's/^/  /'
echo "  with it:"
$w exec "$net" -- curl -sS --noproxy '' --max-time 10 "http://127.0.0.1:$port/" | sed 's/^/    /'
$w egress "$net"
$w rm "$net" >/dev/null
kill $server 2>/dev/null || true
rm -f "$tmp_port"
trap - EXIT
log "a workspace with its own PostgreSQL: fork it into 2 attempts, each gets a branch of the database from that instant"
python3 - <<'PY' | sed 's/^/  /'
import subprocess
from warren import Database, NotFoundError, Sandbox

def psql(url, sql):
    r = subprocess.run(["/usr/lib/postgresql/15/bin/psql", url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, check=True)
    return r.stdout.strip()

try:
    Database.get("demo_shop").delete()  # left by an interrupted run
except NotFoundError:
    pass
ws = Sandbox.create(ttl_seconds=600, databases=["demo_shop"])  # demo_shop is made for it
attempts = []
try:
    print("inside:", ws.exec('echo "DATABASE_URL=postgres://postgres:***@${DATABASE_URL#*@}"').stdout.strip())
    psql(Database.get("demo_shop").url(), "CREATE TABLE orders (item text); INSERT INTO orders VALUES ('from the parent')")
    attempts = ws.fork_tree(2)
    for i, child in enumerate(attempts):
        branch = Database.get(child.databases()[0]["name"])
        psql(branch.url(), f"INSERT INTO orders VALUES ('attempt {i}')")
        print(f"{child.id} uses {branch.name}: {psql(branch.url(), 'SELECT string_agg(item, chr(44)) FROM orders')}")
    print(f"{ws.id} uses demo_shop: {psql(Database.get('demo_shop').url(), 'SELECT string_agg(item, chr(44)) FROM orders')}")
finally:
    for s in [*attempts, ws]:
        s.kill()  # the databases made for each sandbox go with it
PY

log "many users: a scoped API key sees only its own sandboxes; a token reaches one sandbox and nothing else"
made=$($w key create --name "demo team" --scope sandboxes:create,sandboxes:read,sandboxes:exec,sandboxes:manage --quota sandboxes=3 --json)
team_id=$(printf '%s' "$made" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
team=$(printf '%s' "$made" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
trap '$w key revoke "$team_id" >/dev/null 2>&1 || true' EXIT
tid=$(WARREN_API_KEY=$team $w create --ttl 600)
echo "  the team's key ($team_id) lists $(WARREN_API_KEY=$team $w ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') sandbox: $tid; the admin key lists every key's: $($w ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
tok=$(WARREN_API_KEY=$team $w token create "$tid" --scope read,exec --ttl 10m 2>/dev/null)
echo "  a token for $tid: $(WARREN_API_KEY=$tok $w exec "$tid" -- echo hello from the agent)"
echo "  the same token listing sandboxes: $(WARREN_API_KEY=$tok $w ls 2>&1 | head -1)"
$w rm "$tid" >/dev/null
$w key revoke "$team_id" >/dev/null
trap - EXIT
echo "  the team key's calls that changed something, from the audit trail: $($w audit --key "$team_id" --json | python3 -c 'import json,sys; print(", ".join(e["method"] + " " + str(e["status"]) for e in json.load(sys.stdin)))')"

log "from Python (import warren): an agent's shell tool fixes a bug in a checkout at /work"
python3 examples/python/shell_tool.py | sed 's/^/  /' | tail -8

log "agent tools served by the daemon: a million lines of output come back as their last 300 characters, cut inside the sandbox; an edit"
python3 - <<'PY' | sed 's/^/  /'
from warren import Sandbox, Toolset
with Sandbox.create(ttl_seconds=600) as sbx:
    tools = Toolset(sbx, cwd="/work", max_output_chars=300)
    r = tools.call("bash", {"command": "seq 1000000"})
    print(r["stdout"].splitlines()[0], "...", r["stdout"].splitlines()[-1], "| exit", r["exit_code"])
    tools.call("str_replace_based_edit_tool", {"command": "create", "path": "/work/hi.py", "file_text": "print('hi')\n"})
    tools.call("str_replace_based_edit_tool", {"command": "str_replace", "path": "/work/hi.py", "old_str": "hi", "new_str": "edited by the tool"})
    print(tools.call("bash", {"command": "python3 hi.py"})["stdout"].strip())
PY

log "E2B's official SDK, unchanged, against this daemon (eval \"\$(warren e2b env)\"): create, run, files, pause and resume"
(
  eval "$($w e2b env)"
  node --input-type=module - <<'JS' | sed 's/^/  /'
import { Sandbox } from 'e2b';
const sbx = await Sandbox.create({ metadata: { demo: 'e2b' } });
try {
  const r = await sbx.commands.run('echo "hello from $(whoami) in $(pwd)"');
  await sbx.files.write('notes.txt', 'kept across pause');
  await sbx.pause();
  const again = await Sandbox.connect(sbx.sandboxId);
  console.log(`${sbx.sandboxId}: ${r.stdout.trim()}; after pause and resume: ${await again.files.read('notes.txt')}`);
} finally {
  await sbx.kill();
}
JS
)

log "the dashboard: every sandbox live, the fork tree, a terminal and files in the browser (docs/dashboard.md)"
# A one-time login link, valid for a minute; `warren ui` opens one in a local browser.
link=$($w ui --url)
curl -fsS -o /dev/null "${link%%/ui/login*}/ui/"
echo "  served at ${link%%/ui/login*}/ui/; this link logs a browser in once within a minute: $link"

log "demo finished. Try: ./bin/warren create, ./bin/warren exec ID -- CMD, ./bin/warren ui, ./bin/warren --help"
