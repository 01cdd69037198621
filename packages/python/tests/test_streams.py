"""Unit tests of the streamed answers against a fake daemon: exec and follow NDJSON (output
passed on live, errors inside a stream, a stream cut short), file downloads, template build
events, and AsyncSandbox's callbacks on the event loop."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
import threading
import time
import unittest
from typing import AsyncIterator, Iterator
from unittest import mock

from _support import FakeDaemon, Reply, ndjson, slowly
from test_client import SANDBOX

from warren import (
    AsyncSandbox,
    BuildEvent,
    CommandError,
    HttpClient,
    InvalidArgumentError,
    NetworkError,
    OutputChunk,
    ProcessHandle,
    Sandbox,
    SandboxInfo,
    Template,
    TemplateBuildError,
    UnavailableError,
)

EXIT = {"type": "exit", "pid": 7, "exitCode": 0, "timedOut": False, "durationMs": 12}


class StreamCase(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeDaemon()
        self.addCleanup(self.fake.close)
        self.client = HttpClient(self.fake.url, "k")
        self.addCleanup(self.client.close)
        self.sbx = Sandbox(self.client, SandboxInfo.from_wire(SANDBOX))
        self.fake.route("GET", "/v1/sandboxes/sb-1", Reply(json=SANDBOX))

    def exec_replies(self, *events: dict[str, object], delay: float = 0.0) -> None:
        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(chunks=slowly(ndjson(*events), delay)))


class Exec(StreamCase):
    def test_output_is_passed_on_in_order_and_gathered_in_the_result(self) -> None:
        self.exec_replies(
            {"type": "start", "pid": 7},
            {"type": "stdout", "data": "a\n"},
            {"type": "keepalive"},
            {"type": "stderr", "data": "warn\n"},
            {"type": "stdout", "data": "b"},
            {**EXIT, "exitCode": 3, "signal": "SIGTERM"},
            delay=0.01,
        )
        seen: list[tuple[str, str]] = []
        r = self.sbx.exec(["echo", "x y"], on_stdout=lambda d: seen.append(("out", d)), on_stderr=lambda d: seen.append(("err", d)))
        self.assertEqual(seen, [("out", "a\n"), ("err", "warn\n"), ("out", "b")])
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.signal, r.pid, r.timed_out, r.duration_ms), ("a\nb", "warn\n", 3, "SIGTERM", 7, False, 12))
        req = self.fake.requests[-1]
        self.assertEqual(req.query, {"stream": "1"})
        self.assertEqual(req.json(), {"argv": ["echo", "x y"]})

    def test_callbacks_run_while_the_command_still_runs(self) -> None:
        called = threading.Event()

        def events() -> Iterator[bytes]:
            yield from ndjson({"type": "stdout", "data": "early"})
            # The exit comes only after the client has passed the output on.
            called.wait(5)
            yield from ndjson({**EXIT, "exitCode": 0 if called.is_set() else 99})

        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(chunks=events()))
        self.assertEqual(self.sbx.exec("x", on_stdout=lambda d: called.set()).exit_code, 0)

    def test_a_shell_command_and_every_option_go_in_the_body(self) -> None:
        self.exec_replies(EXIT)
        self.sbx.exec("cd /work && ls", timeout_seconds=5, cwd="/tmp", env={"A": "1"}, user="root", stdin="in\n")
        self.assertEqual(
            self.fake.requests[-1].json(), {"cmd": "cd /work && ls", "timeoutSeconds": 5, "cwd": "/tmp", "env": {"A": "1"}, "user": "root", "stdin": "in\n"}
        )

    def test_bytes_stdin_follows_the_start_on_its_own_streamed_request(self) -> None:
        # Bytes are not text: they go raw to the process named by the start event, never in the JSON.
        self.exec_replies({"type": "start", "pid": 7}, {"type": "stdout", "data": "ok"}, EXIT)
        self.fake.route("PUT", "/v1/sandboxes/sb-1/processes/7/stdin", Reply(json={"bytes": 2}))
        self.assertEqual(self.sbx.exec("cat", stdin=b"\x00\xff").stdout, "ok")
        start, put = self.fake.requests
        self.assertEqual((start.query, start.json()), ({"stream": "1"}, {"cmd": "cat", "keepStdinOpen": True}))
        self.assertEqual((put.query, put.body), ({"close": "1"}, b"\x00\xff"))

    def test_check_raises_command_error_carrying_the_result(self) -> None:
        self.exec_replies({"type": "stderr", "data": "l1\nl2\nl3\nl4\n"}, {**EXIT, "exitCode": 2})
        with self.assertRaises(CommandError) as caught:
            self.sbx.exec("make", check=True)
        err = caught.exception
        self.assertEqual((err.exit_code, err.result.exit_code, err.stderr, err.code), (2, 2, "l1\nl2\nl3\nl4\n", "failed_precondition"))
        self.assertEqual(str(err), 'command "make" exited with code 2: l2\nl3\nl4')
        self.exec_replies({**EXIT, "exitCode": None, "timedOut": True})
        with self.assertRaises(CommandError) as caught:
            self.sbx.exec(["sleep", "9"], check=True)
        self.assertEqual(str(caught.exception), 'command "sleep 9" timed out')
        self.assertTrue(caught.exception.timed_out)

    def test_without_check_a_failure_is_a_result(self) -> None:
        self.exec_replies({**EXIT, "exitCode": 1})
        self.assertEqual(self.sbx.exec("false").exit_code, 1)

    def test_a_stream_without_an_exit_is_unavailable(self) -> None:
        self.exec_replies({"type": "stdout", "data": "x"})
        with self.assertRaises(UnavailableError):
            self.sbx.exec("x")

    def test_an_error_inside_the_stream_raises_its_class(self) -> None:
        self.exec_replies({"type": "stdout", "data": "x"}, {"type": "error", "code": "unavailable", "message": "the agent died"})
        with self.assertRaises(UnavailableError) as caught:
            self.sbx.exec("x")
        self.assertEqual(str(caught.exception), "the agent died")

    def test_large_lines_and_lines_split_across_chunks_parse(self) -> None:
        big = "x" * (2 * 1024 * 1024)
        body = b"".join(ndjson({"type": "stdout", "data": big}, {"type": "stdout", "data": "é"}, EXIT))
        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(chunks=[body[i : i + 1000] for i in range(0, len(body), 1000)]))
        self.assertEqual(self.sbx.exec("x").stdout, big + "é")

    def test_execs_one_after_another_reuse_one_connection(self) -> None:
        # The exit event is read before the end of the chunked body: the client reads that
        # end too, so the connection goes back to the pool instead of being closed.
        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", lambda r: Reply(chunks=ndjson({"type": "start", "pid": 7}, {"type": "stdout", "data": "x"}, EXIT)))
        for _ in range(3):
            self.assertEqual(self.sbx.exec(["true"]).stdout, "x")
        self.assertEqual(self.sbx.refresh().id, "sb-1")
        self.assertEqual([r.connection for r in self.fake.requests], [1, 1, 1, 1])

    def test_a_stream_that_goes_on_after_its_exit_is_closed_not_waited_for(self) -> None:
        release = threading.Event()
        self.addCleanup(release.set)

        def lingering() -> Iterator[bytes]:
            yield from ndjson(EXIT)
            release.wait(10)

        def flood() -> Iterator[bytes]:
            yield from ndjson(EXIT)
            yield from ndjson(*[{"type": "keepalive", "pad": "p" * 1000}] * 100)

        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(chunks=lingering()))
        with mock.patch("warren.client.DRAIN_TIMEOUT", 0.2):
            t0 = time.monotonic()
            self.assertEqual(self.sbx.exec("x").exit_code, 0)
            self.assertLess(time.monotonic() - t0, 5)
        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(chunks=flood()))
        self.assertEqual(self.sbx.exec("x").exit_code, 0)
        self.assertEqual(self.sbx.refresh().id, "sb-1")
        self.assertEqual([r.connection for r in self.fake.requests], [1, 2, 3])

    def test_background_returns_a_handle_at_once(self) -> None:
        self.fake.route("POST", "/v1/sandboxes/sb-1/exec", Reply(201, json={"pid": 42}))
        h = self.sbx.exec("server", background=True, tag="web", keep_stdin_open=True)
        self.assertIsInstance(h, ProcessHandle)
        self.assertEqual((h.pid, h.sandbox_id), (42, "sb-1"))
        self.assertEqual(self.fake.requests[-1].json(), {"cmd": "server", "background": True, "tag": "web", "keepStdinOpen": True})
        self.assertEqual(self.fake.requests[-1].query, {})

    def test_background_refuses_options_that_need_the_output(self) -> None:
        with self.assertRaises(InvalidArgumentError):
            self.sbx.exec("x", background=True, check=True)  # type: ignore[call-overload]
        self.assertEqual(self.fake.requests, [])


class Processes(StreamCase):
    def test_follow_yields_chunks_then_the_result(self) -> None:
        self.fake.route("GET", "/v1/sandboxes/sb-1/processes/7/output", Reply(chunks=ndjson({"type": "stdout", "data": "1"}, {"type": "stderr", "data": "2"}, EXIT)))
        with self.sbx.processes.get(7).follow(stdout_offset=5) as out:
            chunks = list(out)
        self.assertEqual(chunks, [OutputChunk("stdout", "1"), OutputChunk("stderr", "2")])
        assert out.result is not None
        self.assertEqual((out.result.stdout, out.result.stderr, out.result.exit_code), ("1", "2", 0))
        self.assertEqual(self.fake.requests[-1].query, {"follow": "1", "stdoutOffset": "5"})

    def test_stopping_a_follow_early_drops_only_that_connection(self) -> None:
        release = threading.Event()

        def endless() -> Iterator[bytes]:
            yield from ndjson({"type": "stdout", "data": "tick"})
            release.wait(5)

        self.fake.route("GET", "/v1/sandboxes/sb-1/processes/7/output", Reply(chunks=endless()))
        stream = self.sbx.processes.get(7).follow()
        self.assertEqual(next(stream).data, "tick")
        stream.close()
        release.set()
        self.assertEqual(self.sbx.refresh().id, "sb-1")

    def test_stdin_signal_output_and_list(self) -> None:
        base = "/v1/sandboxes/sb-1/processes"
        self.fake.route("POST", f"{base}/7/stdin", Reply(204))
        self.fake.route("POST", f"{base}/7/signal", Reply(204))
        self.fake.route("GET", f"{base}/7/output", Reply(json={"pid": 7, "stdout": "o", "stderr": "", "stdoutOffset": 1, "stderrOffset": 0, "running": True, "exitCode": None}))
        self.fake.route("GET", base, Reply(json={"processes": [{"pid": 7, "command": ["sh"], "running": True, "exitCode": None, "timedOut": False, "startedAt": "t", "tag": "x"}]}))
        h = self.sbx.processes.get(7)
        h.send_stdin("hi\n")
        h.send_stdin(b"\xc3\xa9")
        h.close_stdin()
        h.signal()
        h.kill()
        bodies = [r.json() for r in self.fake.requests]
        # Bytes go as base64: any bytes arrive intact, not only UTF-8.
        self.assertEqual(bodies, [{"data": "hi\n"}, {"data": "w6k=", "encoding": "base64"}, {"data": "", "close": True}, {"signal": "SIGTERM"}, {"signal": "SIGKILL"}])
        out = h.output(stdout_offset=0)
        self.assertEqual((out.stdout, out.stdout_offset, out.running, out.exit_code), ("o", 1, True, None))
        [p] = self.sbx.processes.list()
        self.assertEqual((p.pid, p.tag, p.command, p.started_at), (7, "x", ["sh"], "t"))


class Downloads(StreamCase):
    def test_read_stream_yields_chunks_and_reads_like_a_file(self) -> None:
        data = os.urandom(1_000_000)
        self.fake.route("GET", "/v1/sandboxes/sb-1/files", Reply(body=data))
        with self.sbx.files.read_stream("/f", chunk_size=64 * 1024) as r:
            self.assertEqual(r.size, len(data))
            chunks = list(r)
        self.assertTrue(all(len(c) <= 64 * 1024 for c in chunks))
        self.assertEqual(b"".join(chunks), data)
        with self.sbx.files.read_stream("/f") as r:
            self.assertEqual(r.read(10), data[:10])
            self.assertEqual(r.read(5), data[10:15])
            self.assertEqual(r.read(), data[15:])
            self.assertEqual(r.read(1), b"")

    def test_download_to_a_file_object_or_a_path(self) -> None:
        data = os.urandom(300_000)
        self.fake.route("GET", "/v1/sandboxes/sb-1/files", Reply(body=data))
        sink = io.BytesIO()
        self.assertEqual(self.sbx.files.download("/f", sink), len(data))
        self.assertEqual(sink.getvalue(), data)
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "out")
            self.assertEqual(self.sbx.files.download("/f", target), len(data))
            with open(target, "rb") as f:
                self.assertEqual(f.read(), data)

    def test_a_download_cut_short_is_an_error_and_leaves_no_file(self) -> None:
        self.fake.route("GET", "/v1/sandboxes/sb-1/files", Reply(body=b"x" * 1000, declared=5000))
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "out")
            with self.assertRaises(NetworkError):
                self.sbx.files.download("/f", target)
            self.assertFalse(os.path.exists(target))
        with self.assertRaises(NetworkError):
            self.sbx.files.read("/f")


class TemplateBuilds(StreamCase):
    def test_events_are_passed_on_and_done_returns_the_template(self) -> None:
        events = [
            {"type": "step", "step": 1, "total": 2, "kind": "from", "description": "from base", "cached": True},
            {"type": "log", "step": 2, "stream": "stdout", "line": "hi"},
            {"type": "step_done", "step": 2, "total": 2, "cached": False, "elapsedMs": 5},
            {"type": "done", "template": {"name": "t", "version": "v1", "builtAt": "x", "env": {"A_B": "1"}, "from": "base"}, "elapsedMs": 9},
        ]
        self.fake.route("POST", "/v1/templates/build", Reply(chunks=ndjson(*events)))
        seen: list[BuildEvent] = []
        with tempfile.TemporaryDirectory() as ctx:
            info = Template.from_("base").run("echo hi", user="user").env({"A_B": "1"}).build("t", context_dir=ctx, on_event=seen.append, url=self.fake.url, api_key="k")
            self.assertEqual(self.fake.requests[-1].json()["contextDir"], ctx)
        self.assertEqual((info.name, info.version, info.env, info.from_), ("t", "v1", {"A_B": "1"}, "base"))
        self.assertEqual([e.type for e in seen], ["step", "log", "step_done", "done"])
        self.assertEqual((seen[1].line, seen[2].elapsed_ms), ("hi", 5))
        body = self.fake.requests[-1].json()
        self.assertEqual(body["steps"], [{"type": "run", "cmd": "echo hi", "user": "user"}, {"type": "env", "env": {"A_B": "1"}}])
        self.assertEqual((body["name"], body["from"]), ("t", "base"))

    def test_a_failed_step_raises_with_its_exit_code_and_output(self) -> None:
        self.fake.route("POST", "/v1/templates/build", Reply(chunks=ndjson({"type": "error", "code": "failed_precondition", "message": "step 2 failed", "step": 2, "exitCode": 1, "output": "boom"})))
        with self.assertRaises(TemplateBuildError) as caught:
            Template.build_recipe({"name": "t", "from": "base"}, url=self.fake.url, api_key="k")
        err = caught.exception
        self.assertEqual((err.code, err.step, err.exit_code, err.output, str(err)), ("failed_precondition", 2, 1, "boom", "step 2 failed"))

    def test_the_recipe_builder_is_immutable(self) -> None:
        base = Template.from_("debian:bookworm", include=["git"]).apt_install(["jq"])
        a = base.workdir("/a").user("user").start("srv", cwd="/a").ready_port(80, timeout_seconds=5)
        b = base.copy("x", "/x", owner="user").ready_command("true")
        self.assertEqual(base.to_recipe("n"), {"name": "n", "from": "debian:bookworm", "include": ["git"], "steps": [{"type": "apt", "packages": ["jq"]}]})
        self.assertEqual(a.to_recipe("a")["start"], {"cmd": "srv", "cwd": "/a"})
        self.assertEqual(a.to_recipe("a")["ready"], {"port": 80, "timeoutSeconds": 5})
        self.assertEqual(b.to_recipe("b")["steps"][-1], {"type": "copy", "src": "x", "dest": "/x", "owner": "user"})
        self.assertEqual(b.to_recipe("b")["ready"], {"cmd": "true"})


class Async(StreamCase):
    def test_callbacks_run_on_the_event_loop_sync_or_async(self) -> None:
        self.exec_replies({"type": "stdout", "data": "a"}, {"type": "stderr", "data": "b"}, {"type": "stdout", "data": "c"}, EXIT, delay=0.01)

        async def main() -> tuple[list[str], set[int], int]:
            loop_thread = threading.get_ident()
            threads: set[int] = set()
            seen: list[str] = []

            def on_out(d: str) -> None:
                threads.add(threading.get_ident())
                seen.append(d)

            async def on_err(d: str) -> None:
                await asyncio.sleep(0.01)
                threads.add(threading.get_ident())
                seen.append(d.upper())

            sbx = AsyncSandbox(self.sbx)
            r = await sbx.exec("x", on_stdout=on_out, on_stderr=on_err)
            self.assertEqual(r.stdout, "ac")
            return seen, threads, loop_thread

        seen, threads, loop_thread = asyncio.run(main())
        self.assertEqual(seen, ["a", "B", "c"])
        self.assertEqual(threads, {loop_thread})

    def test_an_exception_in_a_callback_ends_the_call(self) -> None:
        self.exec_replies({"type": "stdout", "data": "a"}, EXIT)

        async def main() -> None:
            def bad(d: str) -> None:
                raise ValueError("from the callback")

            with self.assertRaises(ValueError):
                await AsyncSandbox(self.sbx).exec("x", on_stdout=bad)

        asyncio.run(main())

    def test_async_iterables_upload_and_streams_iterate(self) -> None:
        self.fake.route("PUT", "/v1/sandboxes/sb-1/files", lambda r: Reply(json={"size": len(r.body), "path": "/x"}))
        self.fake.route("GET", "/v1/sandboxes/sb-1/files", Reply(body=b"0123456789"))
        self.fake.route("GET", "/v1/sandboxes/sb-1/processes/7/output", Reply(chunks=ndjson({"type": "stdout", "data": "1"}, EXIT)))

        async def parts() -> AsyncIterator[bytes]:
            for i in range(3):
                await asyncio.sleep(0)
                yield str(i).encode()

        async def main() -> None:
            sbx = AsyncSandbox(self.sbx)
            self.assertEqual((await sbx.files.write("/x", parts())).size, 3)
            self.assertEqual(self.fake.requests[-1].body, b"012")
            reader = await sbx.filesystem.read_stream("/x")
            self.assertEqual(b"".join([c async for c in reader]), b"0123456789")
            out = await sbx.processes.get(7).follow()
            self.assertEqual([c.data async for c in out], ["1"])
            assert out.result is not None
            self.assertEqual(out.result.exit_code, 0)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
