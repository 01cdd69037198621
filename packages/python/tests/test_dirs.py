"""Unit: the host side of directory transfers (warren.dirs) without a daemon: pack/extract
round trip, exists policies, and hostile archives refused with nothing written outside the
destination and nothing partial beside it (the same cases as tests/src/dirs.test.ts); every
rule of the strict tar check (warren.tar_check, the same rules as the TS SDK's TarChecker)
on a crafted archive, valid archives from tarfile and GNU tar, and the lstat walk."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import tarfile
import tempfile
import unittest

import _support  # noqa: F401  (puts this checkout's warren first on sys.path)
from _tar_bytes import BLOCK, END, GNU, checksum, header, long_name, member, pad, pax, pax_record

from warren import InvalidArgumentError, WarrenError
from warren.dirs import extract_dir, pack_dir
from warren.tar_check import CheckedSource, TarChecker
from warren.tar_rules import check_tree, symlink_escape


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

    def listing(self, root: str) -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(root):
            for name in sorted(dirnames + filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                out.append(f"{rel} -> {os.readlink(full)}" if os.path.islink(full) else rel)
        return sorted(out)

    def test_two_merged_downloads_cannot_make_a_link_lead_out_in_either_order(self) -> None:
        m1, m2, out = (os.path.join(self.tmp, n) for n in ("m1", "m2", "out"))
        os.makedirs(m1)
        os.makedirs(m2)
        os.symlink(".", os.path.join(m1, "d"))
        os.symlink("d/d/d/../../..", os.path.join(m2, "e"))
        with open(os.path.join(m2, "f"), "w") as f:
            f.write("second")
        extract_dir(io.BytesIO(b"".join(pack_dir(m1))), out)
        before = self.listing(out)
        with self.assertRaises(WarrenError) as caught:
            extract_dir(io.BytesIO(b"".join(pack_dir(m2))), out)
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertIn('refused tar member "e": symlink: its target "d/d/d/../../.." has \'..\' after a name', str(caught.exception))
        self.assertEqual(self.listing(out), before, "the destination is unchanged")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["m1", "m2", "out"], "no temporary directory left beside")
        # The other order: e alone stays inside while d is no link; it is refused then, before a
        # later `d -> .` could make it lead two levels up.
        with self.assertRaises(WarrenError) as caught:
            extract_dir(io.BytesIO(b"".join(pack_dir(m2))), os.path.join(self.tmp, "other"))
        self.assertIn("after a name", str(caught.exception))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["m1", "m2", "out"])

    def test_merge_places_links_that_stay_inside_through_the_destination(self) -> None:
        out, src, via = (os.path.join(self.tmp, n) for n in ("out", "src", "via"))
        os.makedirs(os.path.join(out, "lib", "v1"))
        with open(os.path.join(out, "lib", "v1", "real"), "w") as f:
            f.write("r")
        os.symlink("lib/v1", os.path.join(out, "cur"))
        os.symlink("/", os.path.join(out, "root"))  # the user's own link out
        os.makedirs(os.path.join(src, "lib", "v2"))
        os.symlink("../../cur/real", os.path.join(src, "lib", "v2", "real"))
        os.symlink("lib/v2/real", os.path.join(src, "x"))
        extract_dir(io.BytesIO(b"".join(pack_dir(src))), out)
        with open(os.path.join(out, "x")) as f:
            self.assertEqual(f.read(), "r")
        os.makedirs(via)
        os.symlink("root/etc", os.path.join(via, "etc"))
        with self.assertRaises(WarrenError) as caught:
            extract_dir(io.BytesIO(b"".join(pack_dir(via))), out)
        self.assertIn('refused tar member "etc": symlink: its target "root/etc" leads outside the destination', str(caught.exception))

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


# `s1 -> x/up/..` with `x/up -> ..`: resolved through x/up it leads one level above the
# destination. Extracted before x/up exists it passes tarfile's data filter (realpath sees no
# link yet), so only a check of the whole archive catches it.
S1 = header("s1", "2", linkname="x/up/..")
X_UP = header("x/", "5") + header("x/up", "2", linkname="..")
A = member("a.txt", data=b"a")

# The three framings of the issue, each hiding s1 from one of the parsers (GNU tar and
# node-tar skip a directory's or a slash-named file's "data", where tarfile reads the next
# header; tarfile reads a prefix on any ustar magic, node-tar only on version 00).
FRAMINGS = {
    "a directory header with a non-zero size": header("d/", "5", size=BLOCK) + S1 + X_UP + END,
    "ustar\\0 with version 0\\0 and a prefix": header("s1", "2", linkname="x/up/..", magic=b"ustar\x000\x00", prefix="p")
    + header("p/", "5")
    + header("p/x/", "5")
    + header("p/x/up", "2", linkname="../..")
    + END,
    "a regular-file member whose name ends in '/'": header("d/", "\x00", size=BLOCK) + S1 + X_UP + END,
    "no odd framing, the link first": S1 + X_UP + END,
}

# rule of /tmp/briefs/tar-rules.md (docs/api.md, "Directories") -> (archive, what the refusal says)
REFUSED = {
    "1 no magic (v7)": (member("a.txt", data=b"a", magic=bytes(8)) + END, "neither POSIX ustar nor GNU"),
    "1 ustar\\0 with version 01": (member("a.txt", data=b"a", magic=b"ustar\x0001") + END, "neither POSIX ustar nor GNU"),
    "2 a GNU header with bytes in its prefix field, which tarfile would read as a prefix": (member("a.txt", data=b"a", magic=GNU, prefix="p") + END, "data in its prefix field"),
    "3 a symlink with data": (member("l", "2", b"x" * 10, linkname="a.txt") + END, "a header with a size (10)"),
    "3 a hard link with data": (A + member("h", "1", b"x" * 10, linkname="a.txt") + END, "a header with a size (10)"),
    "3 a pax size on a directory": (pax({"size": "512"}) + header("d/", "5") + bytes(BLOCK) + END, "a directory with 512 bytes of data"),
    "4 a regular file ('0') named f/": (member("f/", "0", b"x") + END, "a name ending in '/'"),
    "4 a pax path ending in / on a file": (pax({"path": "f/"}) + member("f", "0", b"x") + END, "a name ending in '/'"),
    "4 a GNU long name ending in / on a file": (long_name("f/") + member("f", "0", b"x", magic=GNU) + END, "a name ending in '/'"),
    "5 a pax header, then the end": (A + pax({"path": "b.txt"}) + END, "without their member"),
    "5 a GNU long name, then the end": (A + long_name("b.txt") + END, "without their member"),
    "5 two pax headers for one member": (pax({"path": "b"}) + pax({"mtime": "1"}) + A + END, "headers for one member"),
    "5 two GNU long names for one member": (long_name("b") + long_name("c") + A + END, "headers for one member"),
    "5 a GNU long name and a pax path": (long_name("b") + pax({"path": "c"}) + A + END, "twice (a GNU long name and a pax"),
    "5 a GNU long link name and a pax linkpath": (long_name("t", "K") + pax({"linkpath": "u"}) + header("l", "2", linkname="v") + END, "twice (a GNU long name and a pax"),
    "6 a pax key twice": (pax(pax_record("path", "b") + pax_record("path", "c")) + A + END, "twice"),
    "6 a NUL in a pax path": (pax({"path": b"b\x00c"}) + A + END, "NUL"),
    "6 a NUL in a pax linkpath": (pax({"linkpath": b"b\x00c"}) + header("l", "2", linkname="a") + END, "NUL"),
    "6 a GNU.sparse key": (pax({"GNU.sparse.size": "1"}) + A + END, "sparse"),
    "6 a global header setting path": (pax({"path": "b"}, kind="g") + A + END, "global header"),
    "6 a global header setting size": (pax({"size": "1"}, kind="g") + A + END, "global header"),
    "6 a pax size that is not digits": (pax({"size": "1_0"}) + A + END, "bad pax size"),
    "6 a pax record without its newline": (pax(b"9 path=ab") + A + END, "malformed pax record"),
    "6 records hidden in a pax header's padding": (pax({"mtime": "1"}, padding=pax_record("path", "b")) + A + END, "padding"),
    "7 a mode that is not octal": (member("a.txt", data=b"a", fields={100: b"0000a44\x00"}) + END, "malformed mode field"),
    "7 a negative base-256 size": (member("a.txt", fields={124: b"\xff" * 12}) + END, "malformed size field"),
    "7 base-256 with a first byte other than 0x80": (member("a.txt", fields={124: b"\x81" + bytes(11)}) + END, "malformed size field"),
    "7 a number after a NUL": (member("a.txt", data=b"a", fields={136: b"\x0012345670123"}) + END, "malformed mtime field"),
    "9 an empty name": (member("", data=b"a") + END, "without a name"),
    "9 an absolute name": (member("/tmp/warren-abs", data=b"a") + END, "absolute names"),
    "9 a '..' component": (member("a/../../b", data=b"a") + END, "'..' components"),
    "9 a member written through a symlink of the archive": (header("l", "2", linkname="d") + header("d/", "5") + member("l/f", data=b"a") + END, "through the symlink"),
    "9 a member replacing a symlink of the archive": (header("l", "2", linkname="a.txt") + member("l", data=b"a") + END, "replace the symlink"),
    "9 an absolute symlink target": (header("l", "2", linkname="/etc") + END, "absolute path"),
    "9 a symlink above the root": (header("d/", "5") + header("d/l", "2", linkname="../../x") + END, "leads outside"),
    "9 a later symlink changing an earlier target": (header("t", "2", linkname="s/x") + header("s", "2", linkname="..") + END, "leads outside"),
    "9 '..' after a name": (header("t", "2", linkname="s/..") + header("s", "2", linkname=".") + END, "after a name"),
    "9 a hard link to a symlink": (A + header("l", "2", linkname="a.txt") + header("h", "1", linkname="l") + END, "not a regular file earlier"),
    "9 a hard link to a later file": (header("h", "1", linkname="a.txt") + A + END, "not a regular file earlier"),
    "9 a hard link to a directory": (header("d/", "5") + header("h", "1", linkname="d") + END, "not a regular file earlier"),
    "9 a hard link outside": (header("h", "1", linkname="../x") + END, "outside the destination"),
    "10 data after the end-of-archive block": (A + END + b"x" + bytes(BLOCK - 1), "after its end-of-archive block"),
    "10 an end inside a header": (A + header("b.txt")[:100], "in the middle of a member"),
    "10 an end inside a member": (member("a.txt", data=b"x" * 1000)[:BLOCK + 300], "in the middle of a member"),
    "10 a bad checksum": (header("a.txt", chksum=1) + END, "bad header checksum"),
    # tarfile also takes the sum of signed bytes; GNU tar and the TS check take only unsigned ones.
    "10 a signed checksum": (header(b"\xe9t\xe9", chksum=checksum(header(b"\xe9t\xe9")) - 2 * 256) + END, "bad header checksum"),
    "10 no end-of-archive block (cut short)": (A, "no end-of-archive block"),
    # Revision 2 of the rules: each closes a way two readers could see two archives.
    "2 a pax path is no way around the GNU prefix rule": (pax({"path": "b"}) + header("ignored", magic=GNU, prefix="p") + END, "data in its prefix field"),
    "3 a link name on a file": (member("a.txt", data=b"a", linkname="b") + END, "a link name on a file"),
    "3 a pax linkpath on a directory": (pax({"linkpath": "b"}) + header("d/", "5") + END, "a link name on a directory"),
    "3 a metadata header with a link name": (header("././@PaxHeader", "x", linkname="b") + A + END, "metadata header without a name or with a link name"),
    "3 a header size on a directory behind a pax size of 0": (pax({"size": "0"}) + header("d/", "5", size=BLOCK) + bytes(BLOCK) + END, "a header with a size (512)"),
    "5 a global header between a member's metadata and the member": (pax({"path": "b"}) + pax({"comment": "c"}, kind="g") + A + END, "global header between"),
    "5 a GNU long name with bytes after its NUL": (header("././@LongLink", "L", size=5, magic=GNU) + pad(b"a\x00\nb\x00") + A + END, "bytes after its NUL"),
    "5 an empty GNU long name": (long_name("") + A + END, "empty"),
    "6 a pax type record": (pax({"type": "2"}) + A + END, "pax type record"),
    "6 a newline in a pax value": (pax({"comment": "a\n9 path=b"}) + A + END, "a newline in the pax value"),
    "6 a pax record without '='": (pax(b"7 path\n") + A + END, "without a key"),
    "6 a pax record shorter than its key": (pax(b"3 path=b\n") + A + END, "malformed pax record"),
    "6 a pax path that is not UTF-8": (pax({"path": b"\xff"}) + A + END, "not UTF-8"),
    "7 a number without a terminator": (member("a.txt", data=b"a", fields={124: b"000000000001"}) + END, "malformed size field"),
    "7 a blank mode": (member("a.txt", data=b"a", fields={100: bytes(8)}) + END, "malformed mode field"),
    "7 a base-256 size past 2^53": (member("a.txt", fields={124: b"\x80" + b"\xff" * 11}) + END, "too large"),
    "9 an empty component": (member("a//b", data=b"a") + END, "empty or '.' components"),
    "9 a '.' component": (member("a/./b", data=b"a") + END, "empty or '.' components"),
    "9 a name that is not UTF-8": (member(b"\xff.txt", data=b"a") + END, "not UTF-8"),
    "9 a name one component over the depth limit": (pax({"path": "/".join(["d"] * 129)}) + member("x", data=b"a") + END, "129 components, over the limit of 128"),
    "9 a name over 4096 bytes": (pax({"path": ("n" * 200 + "/") * 20 + "n" * 77}) + member("x", data=b"a") + END, "4097 bytes, over the limit of 4096"),
    "9 a symlink target over 4096 bytes": (pax({"linkpath": "l" * 4097}) + header("s", "2", linkname="x") + END, "a link name of 4097 bytes"),
    "9 a file named twice": (A + A + END, "replace the file of the same name"),
    "9 a member under a file": (A + member("a.txt/b", data=b"b") + END, "under the file"),
    "9 a hard link to a name with a trailing '/'": (A + header("h", "1", linkname="a.txt/") + END, "not a plain name"),
    "10 bytes after the NUL of a name field": (member(b"a.txt\x00\nb", data=b"a") + END, "bytes after the end of the name field"),
    "10 a metadata header without a name": (header("", "x", size=0) + A + END, "metadata header without a name"),
    "10 an empty stream": (b"", "no end-of-archive block"),
    "10 an archive without a member": (END, "no member"),
    "a gzip magic in front": (header(b"\x1f\x8b.txt") + END, "looks compressed"),
}
for kind in "7346SVMDNXA":
    REFUSED[f"8 member type {kind!r}"] = (member("t.bin", kind) + END, "unsupported member type")


def listing(root: str) -> dict[str, str]:
    """relative path -> 'dir', 'link:TARGET' or 'file:CONTENT', never following links."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = f"link:{os.readlink(full)}"
            elif os.path.isdir(full):
                out[rel] = "dir"
            else:
                with open(full, "rb") as f:
                    out[rel] = f"file:{f.read().decode()}"
    return out


class StrictTar(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="warren-pytar-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp], check=True))

    def refused(self, archive: bytes, says: str) -> None:
        box = os.path.join(self.tmp, "box")
        os.makedirs(box, exist_ok=True)
        with open(os.path.join(box, "sentinel"), "w") as f:
            f.write("s")
        with self.assertRaises(WarrenError) as caught:
            extract_dir(io.BytesIO(archive), os.path.join(box, "out"))
        err = caught.exception
        self.assertIsInstance(err, InvalidArgumentError, str(err))
        self.assertEqual(err.code, "invalid_argument", str(err))
        self.assertRegex(str(err), r"^refused tar (archive: |member \")")
        self.assertIn(says, str(err))
        if str(err).startswith("refused tar member"):
            self.assertIsNotNone(err.details and err.details.get("member"))
        self.assertEqual(os.listdir(box), ["sentinel"], "nothing partial, nothing beside")
        os.unlink(os.path.join(box, "sentinel"))

    def test_the_framings_of_the_issue_cannot_hide_a_link_leading_outside(self) -> None:
        for what, archive in FRAMINGS.items():
            with self.subTest(what):
                self.refused(archive, "")

    def test_each_rule_refuses_its_archive(self) -> None:
        for what, (archive, says) in REFUSED.items():
            with self.subTest(what):
                self.refused(archive, says)

    def test_raw_archives_within_the_rules_extract(self) -> None:
        long = "n" * 150 + ".txt"
        valid = {
            "a positive base-256 size": (member("big.txt", data=b"hello", fields={124: b"\x80" + (5).to_bytes(11, "big")}) + END, {"big.txt": "file:hello"}),
            "a file at the depth limit": (pax({"path": "/".join(["d"] * 128)}) + member("x", data=b"deep") + END, {"/".join(["d"] * i): "dir" for i in range(1, 128)} | {"/".join(["d"] * 128): "file:deep"}),
            "a POSIX prefix": (member("f.txt", data=b"p", prefix="deep/er") + END, {"deep": "dir", "deep/er": "dir", "deep/er/f.txt": "file:p"}),
            "GNU long names and link names": (
                long_name(long) + member("ignored", data=b"l", magic=GNU) + long_name(long, "K") + long_name("l" * 120) + header("ignored", "2", magic=GNU) + END,
                {long: "file:l", "l" * 120: f"link:{long}"},
            ),
            "pax path, linkpath and size": (
                pax({"path": "p" * 200, "size": "3"}) + header("short") + member("", data=b"abc")[BLOCK:] + pax({"linkpath": "p" * 200}) + header("l", "2") + END,
                {"p" * 200: "file:abc", "l": f"link:{'p' * 200}"},
            ),
            "a global header without path, linkpath or size": (pax({"comment": "hi"}, kind="g") + A + END, {"a.txt": "file:a"}),
            "the root, a directory twice, './' names, a hard link, one end block and zeros after it": (
                header("./", "5") + header("d/", "5") + header("./d", "5") + member("./d/f", data=b"f") + header("h", "1", linkname="./d/f") + bytes(BLOCK) + bytes(3 * BLOCK),
                {"d": "dir", "d/f": "file:f", "h": "file:f"},
            ),
        }
        for what, (archive, expected) in valid.items():
            with self.subTest(what):
                out = os.path.join(self.tmp, "out")
                extract_dir(io.BytesIO(archive), out)
                self.assertEqual(listing(out), expected)
                subprocess.run(["rm", "-rf", out], check=True)

    def source_tree(self, long_names: bool) -> str:
        root = os.path.join(self.tmp, "src-long" if long_names else "src")
        deep = os.path.join(root, "d" * 60, "e" * 60)
        os.makedirs(deep)
        os.makedirs(os.path.join(root, "empty"))
        with open(os.path.join(deep, "f" * 90), "w") as f:
            f.write("deep")
        with open(os.path.join(root, "été.txt"), "w") as f:
            f.write("unicode")
        os.link(os.path.join(root, "été.txt"), os.path.join(root, "hard"))
        os.symlink("été.txt", os.path.join(root, "link"))
        if long_names:
            os.symlink(os.path.join("d" * 60, "e" * 60, "f" * 90), os.path.join(root, "deep-link"))
            with open(os.path.join(deep, "g" * 150), "w") as f:
                f.write("long")
        return root

    def test_archives_from_tarfile_and_gnu_tar_extract(self) -> None:
        made = {}
        trees = {True: self.source_tree(True), False: self.source_tree(False)}
        # A file from before 1970: the gnu formats write its time as negative base-256.
        os.utime(os.path.join(trees[True], "été.txt"), (-315619200, -315619200))
        # ustar holds no name over 255 bytes nor a link target over 100 (the short tree).
        for fmt, src in (("gnu", trees[True]), ("pax", trees[True]), ("ustar", trees[False])):
            made[f"GNU tar --format={fmt}"] = (subprocess.run(["tar", "-c", f"--format={fmt}", "-f", "-", "-C", src, "."], check=True, capture_output=True).stdout, src)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format={"gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT, "ustar": tarfile.USTAR_FORMAT}[fmt]) as tf:
                tf.add(src, arcname=".")
            made[f"tarfile {fmt}"] = (buf.getvalue(), src)
        for what, (archive, src) in made.items():
            with self.subTest(what):
                out = os.path.join(self.tmp, "out")
                extract_dir(io.BytesIO(archive), out)
                self.assertEqual(listing(out), listing(src))
                subprocess.run(["rm", "-rf", out], check=True)

    def test_pack_dir_writes_what_the_strict_check_accepts(self) -> None:
        src = self.source_tree(True)
        os.utime(os.path.join(src, "hard"), (-5, -5.5))  # a negative, fractional time goes into a pax record
        archive = b"".join(pack_dir(src))
        checker = TarChecker()
        checker.push(archive)
        checker.end()
        self.assertIn(b"ustar\x0000", archive[257:265])
        out = os.path.join(self.tmp, "out")
        extract_dir(io.BytesIO(archive), out)
        self.assertEqual(listing(out), listing(src))

    def test_pack_dir_refuses_what_the_sandbox_would(self) -> None:
        for what in ("fifo", "socket"):
            with self.subTest(what):
                src = os.path.join(self.tmp, f"src-{what}")
                os.makedirs(src)
                if what == "fifo":
                    os.mkfifo(os.path.join(src, "p"))
                else:
                    sock = socket.socket(socket.AF_UNIX)
                    self.addCleanup(sock.close)
                    sock.bind(os.path.join(src, "p"))
                with self.assertRaises(WarrenError) as caught:
                    b"".join(pack_dir(src))
                self.assertIsInstance(caught.exception, InvalidArgumentError)
                self.assertIn("not a file, directory or symlink", str(caught.exception))

    def test_a_member_tarfile_reads_otherwise_is_refused(self) -> None:
        # Every known way to make tarfile read another member is refused by a rule first; this
        # is the net under them, so it is driven here with TarInfos made to differ.
        checked = CheckedSource(io.BytesIO(A + END))
        checked.read(len(A))
        elsewhere = tarfile.TarInfo("p/a.txt")
        elsewhere.size = 1
        with self.assertRaises(WarrenError) as caught:
            checked.agree(elsewhere)
        self.assertIn('refused tar member "a.txt": Python\'s tarfile read it as a file "p/a.txt"', str(caught.exception))
        with self.assertRaises(WarrenError) as caught:
            checked.agree(tarfile.TarInfo("b.txt"))
        self.assertIn("a member the check did not see", str(caught.exception))
        unread = CheckedSource(io.BytesIO(A + END))
        unread.read(len(A))
        with self.assertRaises(WarrenError) as caught:
            unread.finish()
        self.assertIn('"a.txt": Python\'s tarfile did not read this member', str(caught.exception))

    def test_a_resolution_is_bounded(self) -> None:
        # As the TS test: components walked, and bytes of the targets followed.
        self.assertIsNone(symlink_escape("l", "x/" * 256, {}))
        self.assertIn("more than 256 components", symlink_escape("l", "x/" * 257, {}) or "")
        chain = {f"L{i}": f"L{i + 1}/{'y' * 3000}" for i in range(3)}
        self.assertIn("more than 8192 bytes of link targets", symlink_escape("s", "L0", chain) or "")

    def test_the_lstat_walk_of_the_extracted_tree(self) -> None:
        tree = os.path.join(self.tmp, "tree")
        os.makedirs(os.path.join(tree, "x"))
        os.symlink("..", os.path.join(tree, "x", "up"))
        os.symlink("x/up", os.path.join(tree, "inside"))
        check_tree(tree)
        os.symlink("x/up/..", os.path.join(tree, "s1"))
        with self.assertRaises(WarrenError) as caught:
            check_tree(tree)
        self.assertIn('refused tar member "s1": symlink: its target "x/up/.." has \'..\' after a name', str(caught.exception))
        os.unlink(os.path.join(tree, "s1"))
        os.mkfifo(os.path.join(tree, "x", "p"))
        with self.assertRaises(WarrenError) as caught:
            check_tree(tree)
        self.assertIn('"x/p": extracted as something other than', str(caught.exception))
