# Per-spawn cost of /bin/true from a small process (python3): posix_spawn vs fork vs subprocess.
# Usage: python3 spawn.py '{"n":100,"warmup":5,"uid":1000,"gid":1000}'
# Prints {"results":{method:[ms,...]},"errors":{method:"message"}} on stdout.
import json
import os
import subprocess
import sys
import time

cfg = json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}")
N = cfg.get("n", 100)
WARMUP = cfg.get("warmup", 5)
UID = cfg.get("uid")
GID = cfg.get("gid")
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
TRUE = "/bin/true"


def posix_spawn():
    pid = os.posix_spawn(TRUE, [TRUE], ENV)
    os.waitpid(pid, 0)


def posix_spawn_agent_like():
    # Separate stdin/stdout/stderr pipes and a new session, as the agent needs (no uid change:
    # posix_spawn cannot do that).
    r0, w0 = os.pipe()
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.posix_spawn(TRUE, [TRUE], ENV, file_actions=[(os.POSIX_SPAWN_DUP2, r0, 0), (os.POSIX_SPAWN_DUP2, w1, 1), (os.POSIX_SPAWN_DUP2, w2, 2)], setsid=True)
    for fd in (r0, w1, w2, w0):
        os.close(fd)
    os.read(r1, 1)
    os.read(r2, 1)
    os.close(r1)
    os.close(r2)
    os.waitpid(pid, 0)


def fork_exec():
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(TRUE, [TRUE])
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def subprocess_run():
    subprocess.run([TRUE], env=ENV)


def subprocess_agent_like():
    kw = {}
    if UID is not None:
        kw = {"user": UID, "group": GID, "extra_groups": []}
    subprocess.run([TRUE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/tmp", env=ENV, start_new_session=True, **kw)


METHODS = [
    ("python3 os.posix_spawn /bin/true", posix_spawn),
    ("python3 os.posix_spawn + 3 pipes + setsid", posix_spawn_agent_like),
    ("python3 os.fork + execv /bin/true", fork_exec),
    ("python3 subprocess.run /bin/true", subprocess_run),
    ("python3 subprocess.run (pipes, cwd, env, setsid, uid/gid)", subprocess_agent_like),
]

# Round-robin (one spawn of each method per round), so drifting load hits all alike.
results = {name: [] for name, _ in METHODS}
errors = {}
for i in range(WARMUP + N):
    for name, fn in METHODS:
        if name in errors:
            continue
        try:
            s = time.perf_counter()
            fn()
            t = (time.perf_counter() - s) * 1000
            if i >= WARMUP:
                results[name].append(t)
        except Exception as e:  # noqa: BLE001 - report and go on
            errors[name] = repr(e)
            results.pop(name, None)
print(json.dumps({"results": results, "errors": errors}))
