"""End to end: files.watch, sync and async, as tests/src/watch.test.ts does for the TS SDK:
create, write, rename and remove seen from inside, recursive watches, close, a missing path,
and the watch ending when its directory is removed."""

from __future__ import annotations

import asyncio
import threading
import time

from _support import E2ECase

from warren import AsyncSandbox, NotFoundError, WatchEvent


def wait_for(events: list[WatchEvent], match, what: str, timeout: float = 15.0) -> WatchEvent:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in list(events):
            if match(e):
                return e
        time.sleep(0.05)
    raise AssertionError(f"{what}: not seen in {events}")


class Watch(E2ECase):
    def test_changes_recursive_and_close(self) -> None:
        sbx = self.create()
        sbx.exec("mkdir -p /work/py/sub", check=True)
        events: list[WatchEvent] = []
        with sbx.files.watch("/work/py", recursive=True) as w:
            self.assertEqual((w.path, w.is_dir), ("/work/py", True))
            reader = threading.Thread(target=lambda: [events.append(e) for e in w], daemon=True)
            reader.start()
            sbx.exec("echo 1 > /work/py/a && echo 2 >> /work/py/a", check=True)
            wait_for(events, lambda e: e.type == "create" and e.path == "/work/py/a", "create a")
            sbx.exec("mv /work/py/a /work/py/b", check=True)
            moved = wait_for(events, lambda e: e.path == "/work/py/b", "the new name")
            self.assertEqual((moved.type, moved.old_path), ("rename", "/work/py/a"))
            sbx.exec("mkdir /work/py/sub/new && sleep 0.2 && echo x > /work/py/sub/new/f", check=True)
            wait_for(events, lambda e: e.type == "create" and e.path == "/work/py/sub/new/f", "create in a new subdirectory")
            sbx.exec("rm /work/py/b", check=True)
            wait_for(events, lambda e: e.type == "remove" and e.path == "/work/py/b", "remove b")
        # Leaving the with block closed it: the reading thread's iteration ends.
        reader.join(10)
        self.assertFalse(reader.is_alive())
        count = len(events)
        sbx.exec("touch /work/py/after", check=True)
        time.sleep(0.5)
        self.assertEqual(len(events), count)

    def test_missing_path_and_removed_root(self) -> None:
        sbx = self.create()
        with self.assertRaises(NotFoundError):
            sbx.files.watch("/work/no/such")
        sbx.exec("mkdir -p /work/gone", check=True)
        w = sbx.files.watch("/work/gone")
        sbx.exec("rm -rf /work/gone", check=True)
        seen: list[WatchEvent] = []
        with self.assertRaises(NotFoundError):
            for e in w:
                seen.append(e)
        self.assertIn(("remove", "/work/gone"), [(e.type, e.path) for e in seen])

    def test_async(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with await AsyncSandbox.create(ttl_seconds=600, metadata={"suite": "python", "test": "watch-async"}) as sbx:
            await sbx.exec("mkdir -p /work/aw", check=True)
            async with await sbx.files.watch("/work/aw") as w:
                await sbx.exec("echo x > /work/aw/f", check=True)
                async for e in w:
                    if e.type == "create" and e.path == "/work/aw/f":
                        break
