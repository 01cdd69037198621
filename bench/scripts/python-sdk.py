# The Python SDK's side of the python bench suite: one process, one sandbox, timed calls on
# request so that bench/src/suites/python.ts can interleave them with the TS SDK's.
# Usage: PYTHONPATH=packages/python WARREN_URL=... WARREN_API_KEY=... python3 python-sdk.py SANDBOX_ID
# Warms up, prints {"ready": true, "python": "3.11.7"}, then for each line on stdin (one of
# the CALLS below) makes that call once and prints {"ms": wall time, "cpu": this process's
# CPU time in ms (the SDK's own cost, whatever the daemon takes)}; a failure prints
# {"error": "..."} and exits 1. Ends at EOF.
import json
import platform
import sys
import time

from warren import Sandbox

sbx = Sandbox.connect(sys.argv[1])


def exec_argv():
    r = sbx.exec(["true"])
    if r.exit_code != 0:
        raise RuntimeError(f"exec(['true']) exited {r.exit_code}: {r.stderr}")


def exec_str():
    r = sbx.exec("true")
    if r.exit_code != 0:
        raise RuntimeError(f"exec('true') exited {r.exit_code}: {r.stderr}")


CALLS = {"exec-argv": exec_argv, "exec-str": exec_str, "refresh": sbx.refresh}


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


try:
    for _ in range(10):
        for call in CALLS.values():
            call()
    say({"ready": True, "python": platform.python_version()})
    for line in sys.stdin:
        call = CALLS[line.strip()]
        c0, t0 = time.process_time(), time.perf_counter()
        call()
        t1, c1 = time.perf_counter(), time.process_time()
        say({"ms": (t1 - t0) * 1000, "cpu": (c1 - c0) * 1000})
except Exception as err:  # reported to the suite, which fails with it
    say({"error": f"{type(err).__name__}: {err}"})
    sys.exit(1)
