"""End to end: files round trips of every kind of data, the directory calls, permissions,
and a 64 MiB file streamed both ways with Python's allocations measured to stay small."""

from __future__ import annotations

import hashlib
import io
import os
import random
import tempfile
import tracemalloc

from _support import E2ECase

from warren import NotFoundError, PermissionDeniedError, Sandbox, TooLargeError

MIB = 1024 * 1024
PATTERN = random.Random(7).randbytes(MIB)


class Generated(io.RawIOBase):
    """`size` deterministic pseudo-random bytes made as they are read, never held whole: a
    seekable binary file (so uploads know its length) that is not in memory or on disk."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        out = bytearray()
        at = self.pos
        while len(out) < n:
            # Block k is one random MiB rotated by k bytes: cheap, and no two blocks alike.
            block, skip = divmod(at + len(out), MIB)
            rotate = block % MIB
            data = PATTERN[rotate:] + PATTERN[:rotate]
            out += data[skip : skip + n - len(out)]
        buffer[:n] = out
        self.pos += n
        return n

    @classmethod
    def digest(cls, size: int) -> str:
        h = hashlib.sha256()
        src = cls(size)
        while chunk := src.read(MIB):
            h.update(chunk)
        return h.hexdigest()


class HashSink(io.RawIOBase):
    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.hash.update(data)
        self.count += len(data)
        return len(data)


class Files(E2ECase):
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(ttl_seconds=900, metadata={"suite": "python", "test": "files"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.kill()

    def test_every_kind_of_data_round_trips(self) -> None:
        files = self.sbx.files
        self.assertIs(self.sbx.filesystem, files)
        every_byte = bytes(range(256)) * 3
        self.assertEqual(files.write("/tmp/bytes", every_byte).size, len(every_byte))
        self.assertEqual(files.read("/tmp/bytes"), every_byte)
        files.write("/tmp/text", "ünïcödé ✓\n")
        self.assertEqual(files.read_text("/tmp/text"), "ünïcödé ✓\n")
        files.write("/tmp/io", io.BytesIO(b"from BytesIO"))
        self.assertEqual(files.read("/tmp/io"), b"from BytesIO")
        files.write("/tmp/iter", (b"part%d;" % i for i in range(5)))
        self.assertEqual(files.read("/tmp/iter"), b"part0;part1;part2;part3;part4;")
        with tempfile.TemporaryFile() as f:
            f.write(b"from a host file")
            f.seek(0)
            files.write("relative.txt", f)
        self.assertEqual(files.read("/home/user/relative.txt"), b"from a host file")
        files.write("/tmp/empty", b"")
        self.assertEqual(files.read("/tmp/empty"), b"")

    def test_directories_stat_move_remove_and_mode(self) -> None:
        files = self.sbx.files
        d = files.mkdir("/tmp/tree/a/b")
        self.assertEqual((d.type, d.path), ("directory", "/tmp/tree/a/b"))
        files.write("/tmp/tree/a/one", b"1")
        files.write("/tmp/tree/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        self.assertEqual(files.stat("/tmp/tree/run.sh").mode & 0o777, 0o755)
        self.assertEqual(self.sbx.exec("/tmp/tree/run.sh").stdout, "ran\n")
        self.assertEqual(sorted(e.name for e in files.list("/tmp/tree")), ["a", "run.sh"])
        self.assertIn("/tmp/tree/a/b", [e.path for e in files.list("/tmp/tree", depth=3)])
        stat = files.move("/tmp/tree/a/one", "/tmp/tree/two")
        self.assertEqual((stat.path, stat.size, stat.type, stat.uid), ("/tmp/tree/two", 1, "file", 1000))
        self.assertFalse(files.exists("/tmp/tree/a/one"))
        self.assertTrue(files.exists("/tmp/tree/two"))
        self.assertTrue(files.remove("/tmp/tree"))
        self.assertFalse(files.remove("/tmp/tree"))
        self.assertFalse(files.exists("/tmp/tree"))

    def test_users_and_permissions(self) -> None:
        files = self.sbx.files
        files.write("/root/secret", b"root only", user="root")
        self.assertEqual(files.read("/root/secret", user="root"), b"root only")
        self.assertEqual(files.stat("/root/secret", user="root").uid, 0)
        with self.assertRaises(PermissionDeniedError):
            files.read("/root/secret")
        with self.assertRaises(PermissionDeniedError):
            files.write("/etc/owned", b"x")
        with self.assertRaises(NotFoundError) as caught:
            files.read("/tmp/does-not-exist")
        self.assertIn("/tmp/does-not-exist", str(caught.exception))

    def test_64_mib_streams_both_ways_without_being_held_in_memory(self) -> None:
        size = 64 * MIB
        expected = Generated.digest(size)
        tracemalloc.start()
        try:
            self.assertEqual(self.sbx.files.write("/tmp/big.bin", Generated(size)).size, size)
            _, upload_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            sink = HashSink()
            self.assertEqual(self.sbx.files.download("/tmp/big.bin", sink), size)
            _, download_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            streamed = hashlib.sha256()
            with self.sbx.files.read_stream("/tmp/big.bin") as reader:
                self.assertEqual(reader.size, size)
                for chunk in reader:
                    streamed.update(chunk)
            _, stream_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertEqual(self.sbx.exec("sha256sum /tmp/big.bin | cut -d' ' -f1").stdout.strip(), expected)
        self.assertEqual(sink.hash.hexdigest(), expected)
        self.assertEqual(streamed.hexdigest(), expected)
        # A few 256 KiB blocks and a generated MiB at a time, nowhere near the 64 MiB.
        for name, peak in (("upload", upload_peak), ("download", download_peak), ("read_stream", stream_peak)):
            self.assertLess(peak, 8 * MIB, f"{name} allocated {peak} bytes at its peak")
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(self.sbx.files.download("/tmp/big.bin", os.path.join(d, "big.bin")), size)
            self.assertEqual(os.path.getsize(os.path.join(d, "big.bin")), size)
        self.sbx.files.remove("/tmp/big.bin")


class DiskLimit(E2ECase):
    def test_an_upload_over_the_disk_limit_is_refused_before_it_is_sent(self) -> None:
        sbx = self.create(resources={"disk_mb": 64})
        with self.assertRaises(TooLargeError) as caught:
            sbx.files.write("/tmp/too-big", Generated(100 * MIB))
        self.assertIn("disk limit", str(caught.exception))
        self.assertEqual(caught.exception.status, 413)
        self.assertFalse(sbx.files.exists("/tmp/too-big"))
