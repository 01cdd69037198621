"""End to end: stdin for commands, as bytes, file objects and iterables (sync and async);
binary-safe, streamed, closed at EOF, and refused clearly once a process has exited.
Mirrors tests/src/stdin.test.ts."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from typing import AsyncIterator, Iterator

from _support import E2ECase

from warren import AsyncSandbox, FailedPreconditionError, Sandbox

ALL_BYTES = bytes(range(256))


class Stdin(E2ECase):
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(ttl_seconds=900, metadata={"suite": "python", "test": "stdin"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.kill()

    def test_all_256_byte_values_through_cat(self) -> None:
        r = self.sbx.exec("cat > /tmp/all.bin && sha256sum < /tmp/all.bin", stdin=ALL_BYTES, check=True)
        self.assertEqual(r.stdout, f"{hashlib.sha256(ALL_BYTES).hexdigest()}  -\n")
        self.assertEqual(self.sbx.files.read("/tmp/all.bin"), ALL_BYTES)

    def test_a_tar_from_a_file_object_unpacks_inside(self) -> None:
        files = {"a.txt": b"hello\n", "sub/b.bin": ALL_BYTES * 100}
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        archive.seek(0)
        self.sbx.exec("mkdir -p /tmp/untar", check=True)
        self.sbx.exec(["tar", "x", "-C", "/tmp/untar"], stdin=archive, check=True)
        sums = self.sbx.exec("cd /tmp/untar && sha256sum a.txt sub/b.bin", check=True).stdout
        self.assertEqual(sums, "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items()))

    def test_an_iterable_of_20_mb_arrives_exactly_and_eof_ends_the_command(self) -> None:
        digest = hashlib.sha256()

        def pieces() -> Iterator[bytes]:
            for i in range(20):
                piece = bytes([i]) * (1 << 20)
                digest.update(piece)
                yield piece

        r = self.sbx.exec("tee /tmp/big | wc -c; sha256sum < /tmp/big; rm /tmp/big", stdin=pieces(), check=True)
        self.assertEqual(r.stdout, f"{20 << 20}\n{digest.hexdigest()}  -\n")

    def test_background_bytes_base64_and_streamed_writes(self) -> None:
        proc = self.sbx.exec("sha256sum", background=True, keep_stdin_open=True)
        proc.send_stdin(ALL_BYTES[:100])
        self.assertEqual(proc.write_stdin(ALL_BYTES[100:], close=False), 156)
        proc.close_stdin()
        self.assertEqual(proc.wait().stdout, f"{hashlib.sha256(ALL_BYTES).hexdigest()}  -\n")
        bg = self.sbx.exec(["cat"], background=True, stdin=b"bg\n")
        self.assertEqual(bg.wait().stdout, "bg\n")

    def test_stdin_to_an_exited_process_is_refused(self) -> None:
        proc = self.sbx.exec(["true"], background=True, keep_stdin_open=True)
        proc.wait()
        with self.assertRaises(FailedPreconditionError) as caught:
            proc.write_stdin(b"late")
        self.assertIn("exited", str(caught.exception))
        with self.assertRaises(FailedPreconditionError):
            proc.send_stdin(b"late")

    def test_a_command_that_stops_reading_returns_its_own_result(self) -> None:
        r = self.sbx.exec("head -c 5", stdin=b"A" * (8 << 20))
        self.assertEqual((r.exit_code, r.stdout), (0, "AAAAA"))

    def test_async_stdin_from_an_async_iterable(self) -> None:
        async def main() -> None:
            sbx = await AsyncSandbox.connect(self.sbx.id)

            async def parts() -> AsyncIterator[bytes]:
                for i in range(3):
                    yield b"line%d\n" % i

            r = await sbx.exec("wc -l", stdin=parts())
            self.assertEqual(r.stdout.strip(), "3")
            r = await sbx.exec("cat | sha256sum", stdin=ALL_BYTES)
            self.assertEqual(r.stdout, f"{hashlib.sha256(ALL_BYTES).hexdigest()}  -\n")

        asyncio.run(main())
