"""Seed program 2: best of three. One sandbox gets the task ready (checkout, a first test
run), then fork_tree makes three copies of that instant; each attempt tries its own fix in
its own copy, all three at once from a thread pool, and the first that passes wins.

    python3 examples/python/three_attempts.py
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from local_repo import clone_into, make_bundle

from warren import Sandbox

FIXES = [
    "sed -i 's/return a - b/return b - a/' calc.py",
    "sed -i 's/return a - b/return a + b/' calc.py",
    "sed -i 's/return a - b/return sum((a, b))/' calc.py",
]


def attempt(child: Sandbox, fix: str) -> tuple[bool, str]:
    try:
        r = child.exec(f"cd /work && {fix} && python3 -B -m unittest -q", timeout_seconds=300)
        return r.exit_code == 0, r.stdout + r.stderr
    finally:
        child.kill()


def main() -> int:
    base = Sandbox.create(template="base", ttl_seconds=3600, metadata={"task": "fix-add", "role": "base"})
    try:
        clone_into(base, make_bundle())
        before = base.exec("cd /work && python3 -B -m unittest -q", timeout_seconds=300)
        print(f"before: exit code {before.exit_code}")
        children = base.fork_tree(3, metadata={"task": "fix-add", "role": "attempt"})
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(attempt, children, FIXES))
    finally:
        base.kill()
    for i, (fix, (passed, output)) in enumerate(zip(FIXES, results)):
        print(f"attempt {i}: {'PASS' if passed else 'FAIL'}  {fix}")
        print("  " + output.strip().replace("\n", "\n  ")[-2000:])
    winners = [fix for fix, (passed, _) in zip(FIXES, results) if passed]
    print(f"winner: {winners[0]}" if winners else "no attempt passed")
    return 0 if winners else 1


if __name__ == "__main__":
    sys.exit(main())
