"""Seed program 1: an agent's shell tool. One sandbox per task; every command the model asks
for runs in the task's checkout at /work, and the model sees the tail of the output and the
exit code. Here a fixed list of commands stands in for the model.

    python3 examples/python/shell_tool.py
"""

from __future__ import annotations

import sys

from local_repo import clone_into, make_bundle

from warren import Sandbox

# -B: no bytecode cache. The fix below keeps calc.py's size and lands within the second of
# the first run, so Python would trust the stale calc.pyc (it checks mtime in whole seconds
# and size) and the fixed code would seem to fail.
COMMANDS = [
    "git log --oneline",
    "python3 -B -m unittest -q",
    "sed -i 's/return a - b/return a + b/' calc.py",
    "git diff --stat",
    "python3 -B -m unittest -q",
]


def shell(sbx: Sandbox, command: str, timeout: int = 120) -> str:
    """The tool: what the model gets back from one command."""
    r = sbx.exec(f"cd /work && {command}", timeout_seconds=timeout)
    output = (r.stdout + r.stderr)[-20_000:]
    return f"{output}[exit code {r.exit_code}{', timed out' if r.timed_out else ''}]"


def main() -> int:
    sbx = Sandbox.create(template="base", ttl_seconds=3600, metadata={"agent": "example", "task": "fix-add"})
    try:
        clone_into(sbx, make_bundle())
        for command in COMMANDS:
            print(f"$ {command}")
            print(shell(sbx, command))
        r = sbx.exec("cd /work && python3 -B -m unittest -q", timeout_seconds=120)
        print("tests pass" if r.exit_code == 0 else "tests still fail")
        return r.exit_code or 0
    finally:
        sbx.kill()


if __name__ == "__main__":
    sys.exit(main())
