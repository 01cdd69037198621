"""End to end: upload_dir/download_dir round trips (sync and async) and write_many against a
real daemon, as tests/src/dirs.test.ts does for the TS SDK."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile

from _support import E2ECase

from warren import AsyncSandbox


def manifest(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if os.path.islink(full):
                out.append(f"{rel} l {os.readlink(full)}")
            elif os.path.isdir(full):
                out.append(f"{rel} d")
            else:
                with open(full, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:16]
                out.append(f"{rel} f {st.st_mode & 0o777:o} {digest} {int(st.st_mtime)}")
    return out


class DirsE2E(E2ECase):
    def make_tree(self) -> str:
        root = tempfile.mkdtemp(prefix="warren-pydirs-e2e-")
        self.addCleanup(lambda: os.system(f"rm -rf '{root}'"))
        src = os.path.join(root, "src")
        os.makedirs(os.path.join(src, "a", "empty"))
        for i in range(50):
            with open(os.path.join(src, "a", f"f{i}"), "wb") as f:
                f.write(os.urandom(i * 100))
        with open(os.path.join(src, "run.sh"), "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(os.path.join(src, "run.sh"), 0o755)
        os.chmod(os.path.join(src, "a", "f1"), 0o600)
        os.symlink("a/f2", os.path.join(src, "link"))
        return src

    def test_round_trip_and_write_many(self) -> None:
        src = self.make_tree()
        sbx = self.create()
        r = sbx.files.upload_dir(src, "/home/user/py")
        self.assertEqual((r.path, r.files, r.symlinks), ("/home/user/py", 51, 1))
        self.assertEqual(sbx.exec("/home/user/py/run.sh").stdout.strip(), "hi")
        back = os.path.join(os.path.dirname(src), "back")
        sbx.files.download_dir("/home/user/py", back)
        self.assertEqual(manifest(back), manifest(src))
        written = sbx.files.write_many([{"path": "wm/a.txt", "data": "A"}, {"path": "/home/user/wm/run.sh", "data": b"#!/bin/sh\necho ok\n", "mode": 0o755}])
        self.assertEqual([w.path for w in written], ["/home/user/wm/a.txt", "/home/user/wm/run.sh"])
        self.assertEqual(sbx.exec("cat /home/user/wm/a.txt; /home/user/wm/run.sh").stdout, "Aok\n")

    def test_async_round_trip(self) -> None:
        src = self.make_tree()
        sbx = self.create()

        async def main() -> None:
            asbx = AsyncSandbox(sbx)
            await asbx.files.upload_dir(src, "apy")
            back = os.path.join(os.path.dirname(src), "aback")
            await asbx.files.download_dir("apy", back)
            self.assertEqual(manifest(back), manifest(src))
            await asbx.files.write_many([{"path": "awm.txt", "data": "x"}])

        asyncio.run(main())
