"""A small git repository for the examples, made on the host and shipped into the sandbox
as a git bundle: sandboxes reach no network, so the examples clone from a file instead of a
remote. The repository has one bug (add subtracts) and tests that catch it."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile

from warren import Sandbox

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "test_calc.py": (
        "import unittest\n\nfrom calc import add, mul\n\n\n"
        "class Calc(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    ),
    "README.md": "# calc\n\nRun the tests with `python3 -m unittest`.\n",
}


def make_bundle() -> str:
    """Commits FILES to a fresh repository and returns the path of a bundle of it."""
    root = tempfile.mkdtemp(prefix="warren-example-")
    atexit.register(shutil.rmtree, root, True)
    repo = os.path.join(root, "calc")
    os.mkdir(repo)
    for name, text in FILES.items():
        with open(os.path.join(repo, name), "w") as f:
            f.write(text)
    # No global git configuration needed: identity and branch name are given here.
    env = {**os.environ, "GIT_AUTHOR_NAME": "example", "GIT_AUTHOR_EMAIL": "example@localhost", "GIT_COMMITTER_NAME": "example", "GIT_COMMITTER_EMAIL": "example@localhost"}
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "calc with a bug in add"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    bundle = os.path.join(root, "calc.bundle")
    subprocess.run(["git", "bundle", "create", "-q", bundle, "--all"], cwd=repo, env=env, check=True)
    return bundle


def clone_into(sbx: Sandbox, bundle: str) -> None:
    """Uploads the bundle (streamed from the file) and clones it into /work as the sandbox's
    default user."""
    with open(bundle, "rb") as f:
        sbx.files.write("/tmp/calc.bundle", f)
    sbx.exec("mkdir -p /work && git clone -q /tmp/calc.bundle /work", check=True, timeout_seconds=120)
