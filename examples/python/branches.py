"""Seed program 3: branches. A session is saved (snapshot) before a risky change, a branch is
forked from it to try the change without touching the session, and a new sandbox can start
again from the saved point at any time.

    python3 examples/python/branches.py
"""

from __future__ import annotations

import sys

from local_repo import clone_into, make_bundle

from warren import Sandbox, Snapshots


def tests(sbx: Sandbox) -> int:
    return sbx.exec("cd /work && python3 -B -m unittest -q", timeout_seconds=300).exit_code or 0


def main() -> int:
    session = Sandbox.create(template="base", ttl_seconds=3600, metadata={"task": "fix-add", "role": "session"})
    snap = None
    try:
        clone_into(session, make_bundle())
        snap = session.snapshot(metadata={"task": "fix-add", "label": "before the fix"})
        print(f"saved {snap.id} ({snap.size_bytes} bytes)")

        b = session.fork(metadata={"task": "fix-add", "branch": "b"})
        try:
            source = session.files.read("/work/calc.py")
            b.filesystem.write("/work/calc.py", source.replace(b"return a - b", b"return a + b"))
            on_branch, on_session = tests(b), tests(session)
            print(f"branch b: tests exit {on_branch}; session: tests exit {on_session} (untouched)")
        finally:
            b.kill()

        again = Sandbox.create(snapshot=snap.id, ttl_seconds=600, metadata={"task": "fix-add", "role": "restart"})
        try:
            restarted = again.files.read_text("/work/calc.py")
            print(f"restarted from {snap.id}: calc.py has the bug again: {'a - b' in restarted}")
        finally:
            again.kill()
        return 0 if on_branch == 0 and on_session != 0 and "a - b" in restarted else 1
    finally:
        session.kill()
        if snap is not None:
            Snapshots.delete(snap.id)


if __name__ == "__main__":
    sys.exit(main())
