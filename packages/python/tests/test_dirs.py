"""Unit: the host side of directory transfers (warren.dirs) without a daemon: pack/extract
round trip, exists policies, and hostile archives refused with nothing written outside the
destination and nothing partial beside it. The same cases as tests/src/dirs.test.ts."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import unittest

import _support  # noqa: F401  (puts this checkout's warren first on sys.path)

from warren import WarrenError
from warren.dirs import extract_dir, pack_dir


def crafted(*members: tuple[str, str, str]) -> io.BytesIO:
    """(name, kind, link or data) -> an archive; kind: file, dir, sym, hard, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                data = extra.encode()
                info.size = len(data)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, extra
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, extra
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tf.addfile(info, io.BytesIO(data) if data else None)
    buf.seek(0)
    return buf


HOSTILE = {
    "dot-dot": crafted(("ok.txt", "file", "x"), ("../escaped", "file", "x")),
    "absolute": crafted(("/tmp/warren-abs-escaped", "file", "x")),
    "symlink to / then a member under it": crafted(("root", "sym", "/"), ("root/tmp/warren-via-link", "file", "x")),
    "relative symlink escape then a member under it": crafted(("up", "sym", "../.."), ("up/warren-up-escaped", "file", "x")),
    "hard link to outside": crafted(("h", "hard", "/etc/passwd")),
    "fifo": crafted(("p", "fifo", "")),
}


class Dirs(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="warren-pydirs-")
        self.addCleanup(lambda: os.system(f"rm -rf '{self.tmp}'"))

    def tree(self) -> str:
        root = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(root, "sub", "empty"))
        with open(os.path.join(root, "run.sh"), "w") as f:
            f.write("#!/bin/sh\necho hi\n")
        os.chmod(os.path.join(root, "run.sh"), 0o755)
        with open(os.path.join(root, "sub", "secret"), "w") as f:
            f.write("s")
        os.chmod(os.path.join(root, "sub", "secret"), 0o600)
        os.utime(os.path.join(root, "sub", "secret"), (1_600_000_000, 1_600_000_000))
        os.symlink("../run.sh", os.path.join(root, "sub", "link"))
        return root

    def test_pack_then_extract_keeps_modes_links_and_times(self) -> None:
        root = self.tree()
        out = os.path.join(self.tmp, "out")
        extract_dir(io.BytesIO(b"".join(pack_dir(root))), out)
        self.assertEqual(os.stat(os.path.join(out, "run.sh")).st_mode & 0o777, 0o755)
        self.assertEqual(os.stat(os.path.join(out, "sub", "secret")).st_mode & 0o777, 0o600)
        self.assertEqual(int(os.stat(os.path.join(out, "sub", "secret")).st_mtime), 1_600_000_000)
        self.assertEqual(os.readlink(os.path.join(out, "sub", "link")), "../run.sh")
        self.assertTrue(os.path.isdir(os.path.join(out, "sub", "empty")))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out", "src"])

    def test_exists_policies(self) -> None:
        root = self.tree()
        out = os.path.join(self.tmp, "out")
        os.makedirs(os.path.join(out, "kept"))
        extract_dir(io.BytesIO(b"".join(pack_dir(root))), out)
        self.assertTrue(os.path.isdir(os.path.join(out, "kept")))
        with self.assertRaises(WarrenError) as caught:
            extract_dir(io.BytesIO(b"".join(pack_dir(root))), out, exists="error")
        self.assertEqual(caught.exception.code, "conflict")
        extract_dir(io.BytesIO(b"".join(pack_dir(root))), out, exists="replace")
        self.assertFalse(os.path.exists(os.path.join(out, "kept")))

    def test_hostile_archives_are_refused_and_leave_nothing(self) -> None:
        for what, archive in HOSTILE.items():
            with self.subTest(what):
                box = os.path.join(self.tmp, "box")
                os.makedirs(box, exist_ok=True)
                archive.seek(0)
                with self.assertRaises(WarrenError) as caught:
                    extract_dir(archive, os.path.join(box, "out"))
                self.assertEqual(caught.exception.code, "invalid_argument", str(caught.exception))
                self.assertIn("refused tar", str(caught.exception))
                self.assertEqual(os.listdir(box), [], "nothing partial, nothing beside")
                for outside in ("/tmp/warren-abs-escaped", "/tmp/warren-via-link", os.path.join(self.tmp, "escaped")):
                    self.assertFalse(os.path.lexists(outside), outside)

    def test_control_characters_in_a_refused_name_are_escaped(self) -> None:
        with self.assertRaises(WarrenError) as caught:
            extract_dir(crafted(("\x1b[31m/../../x", "file", "x")), os.path.join(self.tmp, "out"))
        self.assertNotIn("\x1b", str(caught.exception))
