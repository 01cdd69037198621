"""End to end: terminals over the plain HTTP routes (the standard library has no WebSocket
client): size, tty, input, resize, Ctrl-C, output by offset and followed, exit status."""

from __future__ import annotations

import asyncio
import re

from _support import E2ECase, eventually

from warren import AsyncSandbox, FailedPreconditionError, InvalidArgumentError, NotFoundError, Sandbox, Terminal


def kept(term: Terminal) -> str:
    return term.output().data.decode("utf-8", "replace")


class Terminals(E2ECase):
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(ttl_seconds=900, metadata={"suite": "python", "test": "terminals"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.kill()

    def test_a_login_shell_on_a_terminal_its_size_resize_ctrl_c_and_exit_status(self) -> None:
        term = self.sbx.pty.create(cols=100, rows=30)
        self.assertRegex(term.id, r"^term-[0-9a-f]{16}$")
        term.write('echo "S-$(stty size)-$(tty)-$((6*7))"\r')
        m = eventually(lambda: re.search(r"S-(\d+ \d+)-(\S+)-42", kept(term)), 30, "stty size and tty")
        self.assertEqual(m.group(1), "30 100")
        self.assertRegex(m.group(2), r"^/dev/pts/\d+$")
        term.resize(120, 40)
        term.write('echo "R-$(stty size)-$((1+1))"\r')
        self.assertEqual(eventually(lambda: re.search(r"R-(\d+ \d+)-2", kept(term)), 30, "the new size").group(1), "40 120")
        term.write('echo "B-$((2+2))"; sleep 100\r')
        eventually(lambda: "B-4" in kept(term), 30, "sleep to start")
        term.write("\x03")
        term.write('echo "A-$((2+3))"; exit 7\r')
        seen = bytearray()
        self.assertEqual(term.wait(on_data=seen.extend), 7)
        self.assertIn(b"A-5", bytes(seen))
        out = term.output()
        self.assertEqual((out.exited, out.exit_code), (True, 7))
        self.assertEqual(out.offset, 0)
        self.assertEqual(out.next_offset, len(out.data))
        with self.assertRaises(FailedPreconditionError):
            term.write("late\r")
        [info] = [t for t in self.sbx.pty.list() if t.id == term.id]
        self.assertEqual((info.running, info.exit_code), (False, 7))

    def test_output_from_an_offset_kill_and_bad_sizes(self) -> None:
        term = self.sbx.pty.create(cmd='printf "one-%s\\n" $((1+1)); read x; printf "two-%s\\n" "$x"; sleep 100', cols=50, rows=10)
        first = eventually(lambda: (o := term.output()) and "one-2" in o.data.decode() and o, 30, "the first line")
        term.write(b"abc\r")
        eventually(lambda: "two-abc" in term.output(first.next_offset).data.decode(), 30, "only the newer output from the offset")
        term.kill()
        self.assertEqual(term.wait(offset=first.next_offset), 128 + 9)
        term.kill()  # a finished terminal is forgotten
        with self.assertRaises(NotFoundError):
            term.refresh()
        with self.assertRaises(InvalidArgumentError):
            self.sbx.pty.create(cols=0)
        with self.assertRaises(InvalidArgumentError):
            self.sbx.pty.create(cols=80, rows=100000)

    def test_the_async_client_drives_a_terminal(self) -> None:
        async def run() -> tuple[int | None, bytes, list[str]]:
            asbx = AsyncSandbox(self.sbx)
            term = await asbx.pty.create(cmd='read x; echo "got-$x-$((3*3))"; exit 5', cols=70, rows=20)
            await term.write("hello\r")
            seen = bytearray()

            async def collect(chunk: bytes) -> None:
                seen.extend(chunk)

            code = await term.wait(on_data=collect)
            ids = [t.id for t in await asbx.pty.list()]
            return code, bytes(seen), ids if term.id in ids else []

        code, seen, ids = asyncio.run(run())
        self.assertEqual(code, 5)
        self.assertIn(b"got-hello-9", seen)
        self.assertTrue(ids, "the finished terminal is listed")
