"""End to end: AsyncSandbox in an asyncio program."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from _support import E2ECase

from warren import AsyncSandbox, CommandError, NotFoundError


class Async(E2ECase):
    def test_the_async_api_end_to_end(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with await AsyncSandbox.create(ttl_seconds=600, metadata={"suite": "python", "test": "async"}) as sbx:
            seen: list[str] = []

            async def on_stdout(data: str) -> None:
                await asyncio.sleep(0)
                seen.append(data)

            r = await sbx.exec("for i in 1 2; do echo $i; sleep 0.2; done", on_stdout=on_stdout)
            self.assertEqual((r.stdout, "".join(seen)), ("1\n2\n", "1\n2\n"))
            with self.assertRaises(CommandError):
                await sbx.exec("exit 3", check=True)

            async def parts() -> AsyncIterator[bytes]:
                for i in range(3):
                    yield b"chunk%d\n" % i

            self.assertEqual((await sbx.files.write("/tmp/a", parts())).size, 21)
            self.assertEqual(await sbx.filesystem.read_text("/tmp/a"), "chunk0\nchunk1\nchunk2\n")
            reader = await sbx.files.read_stream("/tmp/a")
            self.assertEqual(b"".join([c async for c in reader]), b"chunk0\nchunk1\nchunk2\n")

            proc = await sbx.exec("read x; echo got $x", background=True, keep_stdin_open=True)
            await proc.send_stdin("hello\n")
            self.assertEqual((await proc.wait()).stdout, "got hello\n")
            self.assertIn(proc.pid, [p.pid for p in await sbx.processes.list()])

            # Children work concurrently from one event loop.
            children = await sbx.fork_tree(2)
            try:
                outs = await asyncio.gather(*(c.exec(["cat", "/tmp/a"]) for c in children))
                self.assertEqual([o.stdout for o in outs], ["chunk0\nchunk1\nchunk2\n"] * 2)
            finally:
                await asyncio.gather(*(c.kill() for c in children))
            self.assertEqual((await sbx.refresh()).state, "running")
            sandbox_id = sbx.id
        with self.assertRaises(NotFoundError):
            await AsyncSandbox.connect(sandbox_id)
