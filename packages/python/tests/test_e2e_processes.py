"""End to end: background processes, their stdin, output by offset and followed, signals."""

from __future__ import annotations

from _support import E2ECase, eventually

from warren import ConflictError, FailedPreconditionError, NotFoundError, OutputChunk, ProcessHandle, Sandbox


class Processes(E2ECase):
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(ttl_seconds=900, metadata={"suite": "python", "test": "processes"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.kill()

    def test_stdin_kept_open_output_by_offset_and_wait(self) -> None:
        h = self.sbx.exec("while read line; do echo got:$line; done; echo eof", background=True, tag="reader", keep_stdin_open=True)
        self.assertIsInstance(h, ProcessHandle)
        [info] = [p for p in self.sbx.processes.list() if p.pid == h.pid]
        self.assertEqual((info.tag, info.running), ("reader", True))
        h.send_stdin("one\n")
        first = eventually(lambda: (o := h.output()).stdout and o, 20, "the first line echoed")
        self.assertEqual((first.stdout, first.running), ("got:one\n", True))
        h.send_stdin(b"two\n")
        eventually(lambda: h.output(stdout_offset=first.stdout_offset).stdout == "got:two\n", 20, "only the newer output from the offset")
        h.close_stdin()
        r = h.wait()
        self.assertEqual((r.stdout, r.exit_code), ("got:one\ngot:two\neof\n", 0))
        with self.assertRaises(FailedPreconditionError) as caught:
            h.send_stdin("late\n")
        self.assertIsInstance(caught.exception, ConflictError)

    def test_follow_iterates_output_and_ends_with_the_result(self) -> None:
        h = self.sbx.exec("for i in 1 2 3; do echo $i; sleep 0.2; done; echo bye >&2; exit 5", background=True)
        with h.follow() as out:
            chunks = list(out)
        self.assertEqual("".join(c.data for c in chunks if c.stream == "stdout"), "1\n2\n3\n")
        self.assertIn(OutputChunk("stderr", "bye\n"), chunks)
        assert out.result is not None
        self.assertEqual((out.result.exit_code, out.result.stdout), (5, "1\n2\n3\n"))
        # Following an exited process replays its output from the offsets given.
        self.assertEqual(self.sbx.processes.get(h.pid).wait(stdout_offset=2).stdout, "2\n3\n")

    def test_signals_and_kill(self) -> None:
        h = self.sbx.exec("trap 'echo got TERM; exit 7' TERM; echo ready; while true; do sleep 0.1; done", background=True)
        eventually(lambda: "ready" in h.output().stdout, 20, "the trap to be set")
        h.signal("SIGTERM")
        lines: list[str] = []
        r = h.wait(on_stdout=lines.append)
        self.assertEqual((r.exit_code, "".join(lines)), (7, "ready\ngot TERM\n"))
        sleeper = self.sbx.exec(["sleep", "600"], background=True)
        sleeper.kill()
        done = sleeper.wait()
        self.assertEqual(done.signal, "SIGKILL")

    def test_an_unknown_pid_is_not_found(self) -> None:
        with self.assertRaises(NotFoundError):
            self.sbx.processes.get(99999).output()
