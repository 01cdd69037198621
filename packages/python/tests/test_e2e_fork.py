"""End to end: fork_tree used from threads, creates from many threads at once, snapshots
and forks as branches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from _support import E2ECase, kill_quietly

from warren import NotFoundError, Sandbox, Snapshots


class Forks(E2ECase):
    def test_fork_tree_children_run_from_threads(self) -> None:
        base = self.create()
        base.exec("echo warm > /tmp/state", check=True)
        children = base.fork_tree(3, metadata={"suite": "python", "role": "attempt"})
        for child in children:
            self.addCleanup(kill_quietly, child)
        self.assertEqual(len({c.id for c in children} | {base.id}), 4)
        self.assertEqual({c.info.boot for c in children}, {"fork"})
        self.assertEqual({c.info.source for c in children}, {base.id})
        self.assertEqual(children[0].info.metadata["role"], "attempt")

        def attempt(i: int) -> str:
            child = children[i]
            try:
                return child.exec(f"cat /tmp/state; echo attempt-{i} > /tmp/mine; cat /tmp/mine").stdout
            finally:
                child.kill()

        with ThreadPoolExecutor(3) as pool:
            outputs = list(pool.map(attempt, range(3)))
        self.assertEqual(outputs, [f"warm\nattempt-{i}\n" for i in range(3)])
        self.assertFalse(base.files.exists("/tmp/mine"), "children's writes stay in the children")
        with self.assertRaises(NotFoundError):
            children[0].refresh()

    def test_sandboxes_made_from_many_threads_at_once(self) -> None:
        def one(i: int) -> str:
            with Sandbox.create(ttl_seconds=600, metadata={"suite": "python", "thread": str(i)}) as sbx:
                return sbx.exec(["echo", str(i)]).stdout

        with ThreadPoolExecutor(4) as pool:
            self.assertEqual(list(pool.map(one, range(4))), [f"{i}\n" for i in range(4)])

    def test_snapshot_and_fork_as_branches(self) -> None:
        session = self.create()
        session.exec("mkdir -p /work && echo v1 > /work/file", check=True)
        snap = session.snapshot(metadata={"label": "v1"})
        self.addCleanup(lambda: Snapshots.delete(snap.id))
        self.assertEqual((snap.sandbox_id, snap.metadata), (session.id, {"label": "v1"}))
        self.assertGreater(snap.size_bytes, 0)
        self.assertIn(snap.id, [s.id for s in Snapshots.list()])
        self.assertEqual(Snapshots.get(snap.id).template, "base")

        b = session.fork(metadata={"branch": "b"})
        self.addCleanup(kill_quietly, b)
        b.filesystem.write("/work/file", b"v2 on b\n")
        self.assertEqual(b.files.read("/work/file"), b"v2 on b\n")
        self.assertEqual(session.files.read("/work/file"), b"v1\n")
        session.files.write("/work/file", b"v3 on session\n")

        restored = self.create(snapshot=snap)
        self.assertEqual((restored.info.boot, restored.info.source), ("snapshot", snap.id))
        self.assertEqual(restored.files.read_text("/work/file"), "v1\n")
