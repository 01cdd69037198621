"""Processes inside a sandbox: exec output streams, background handles, output by offset,
stdin and signals. Mirrors the TS SDK's processes.ts."""

from __future__ import annotations

import base64
from typing import Any, Callable, List, Optional
from urllib.parse import quote

from .client import HttpClient, Response
from .errors import UnavailableError, error_from_body
from .models import ExecResult, OutputChunk, ProcessInfo, ProcessOutput
from .stdin import StdinData, put_stdin

OutputCallback = Optional[Callable[[str], object]]


class ProcessStream:
    """A command's output as it comes, from an NDJSON exec or follow stream: iterate it for
    OutputChunks; once the iteration ends, `result` is the ExecResult (with all the output).
    Closing it early (or leaving its `with` block) stops following; the process goes on."""

    def __init__(self, response: Response, on_start: Optional[Callable[[int], object]] = None) -> None:
        self._response = response
        self._on_start = on_start
        self._events = response.iter_ndjson()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self.pid: int | None = None
        self.result: ExecResult | None = None

    def __iter__(self) -> ProcessStream:
        return self

    def __next__(self) -> OutputChunk:
        if self.result is not None:
            raise StopIteration
        for event in self._events:
            kind = event.get("type")
            if kind == "stdout" or kind == "stderr":
                data = str(event.get("data", ""))
                (self._stdout if kind == "stdout" else self._stderr).append(data)
                return OutputChunk(kind, data)
            if kind == "exit":
                wire: dict[str, Any] = {k: v for k, v in event.items() if k != "type"}
                wire["stdout"] = "".join(self._stdout)
                wire["stderr"] = "".join(self._stderr)
                self.result = ExecResult.from_wire(wire)
                # The daemon ends the stream right after the exit event: read that end so
                # the connection is reused rather than closed.
                self._response.drain()
                raise StopIteration
            if kind == "error":
                raise error_from_body(500, {"error": event})
            if kind == "start":
                self.pid = event.get("pid")
                if self._on_start is not None and self.pid is not None:
                    self._on_start(int(self.pid))
            # keepalive lines only keep idle connections open
        raise UnavailableError("unavailable", "the exec stream ended without an exit event (daemon restarted?)")

    def consume(self, on_stdout: OutputCallback = None, on_stderr: OutputCallback = None) -> ExecResult:
        """Reads to the end, calling back on each piece of output; returns the result."""
        with self:
            for chunk in self:
                callback = on_stdout if chunk.stream == "stdout" else on_stderr
                if callback is not None:
                    callback(chunk.data)
        assert self.result is not None  # the iteration only ends cleanly on the exit event
        return self.result

    def close(self) -> None:
        self._events.close()
        self._response.close()

    def __enter__(self) -> ProcessStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ProcessHandle:
    """A process started with `exec(cmd, background=True)` (or found by `processes.get`)."""

    def __init__(self, http: HttpClient, sandbox_id: str, pid: int) -> None:
        self._http = http
        self.sandbox_id = sandbox_id
        self.pid = pid

    def __repr__(self) -> str:
        return f"ProcessHandle(sandbox_id={self.sandbox_id!r}, pid={self.pid})"

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{quote(self.sandbox_id, safe='')}/processes/{self.pid}"

    def output(self, stdout_offset: int | None = None, stderr_offset: int | None = None) -> ProcessOutput:
        """Output from the given offsets (from the start by default; at most 16 MiB of each
        stream per call, so pass the returned offsets again for more) and whether it runs."""
        query = {"stdoutOffset": stdout_offset, "stderrOffset": stderr_offset}
        return ProcessOutput.from_wire(self._http.json("GET", f"{self._base}/output", query=query))

    def follow(self, stdout_offset: int | None = None, stderr_offset: int | None = None) -> ProcessStream:
        """Follows the output until the process exits (from the start unless offsets are
        given): iterate for OutputChunks, then read `.result`.

            with proc.follow() as out:
                for chunk in out:
                    print(chunk.data, end="")
            print(out.result.exit_code)
        """
        query = {"follow": 1, "stdoutOffset": stdout_offset, "stderrOffset": stderr_offset}
        return ProcessStream(self._http.request("GET", f"{self._base}/output", query=query))

    def wait(
        self,
        on_stdout: OutputCallback = None,
        on_stderr: OutputCallback = None,
        stdout_offset: int | None = None,
        stderr_offset: int | None = None,
    ) -> ExecResult:
        """Waits for exit, calling back on output as it comes; returns the ExecResult."""
        return self.follow(stdout_offset, stderr_offset).consume(on_stdout, on_stderr)

    def send_stdin(self, data: str | bytes) -> None:
        """Writes a little to the process's stdin (started with keep_stdin_open=True): text,
        or bytes (sent as base64, so any bytes arrive intact). For large or streamed input
        use write_stdin."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            body = {"data": base64.b64encode(data).decode("ascii"), "encoding": "base64"}
        else:
            body = {"data": data}
        self._http.json("POST", f"{self._base}/stdin", json=body)

    def write_stdin(self, data: StdinData, close: bool = True) -> int:
        """Streams `data` (str, bytes, a file object or an iterable of bytes) into stdin as
        the command reads it, then closes stdin unless close=False. Returns the bytes
        written; FailedPreconditionError if the process has exited or closed its stdin.

            with open("data.tar", "rb") as f:
                proc.write_stdin(f)
        """
        return put_stdin(self._http, self._base, data, close)

    def close_stdin(self) -> None:
        self._http.json("POST", f"{self._base}/stdin", json={"data": "", "close": True})

    def signal(self, signal: str = "SIGTERM") -> None:
        self._http.json("POST", f"{self._base}/signal", json={"signal": signal})

    def kill(self) -> None:
        self.signal("SIGKILL")


class Processes:
    """`sandbox.processes`: the sandbox's processes started through exec."""

    def __init__(self, http: HttpClient, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def list(self) -> List[ProcessInfo]:
        body = self._http.json("GET", f"/v1/sandboxes/{quote(self._sandbox_id, safe='')}/processes")
        return [ProcessInfo.from_wire(p) for p in body["processes"]]

    def get(self, pid: int) -> ProcessHandle:
        """A handle to a process by pid (for example one listed by `list()`)."""
        return ProcessHandle(self._http, self._sandbox_id, pid)

