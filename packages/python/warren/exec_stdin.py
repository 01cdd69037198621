"""A foreground exec with streamed stdin (bytes, a file object, an iterable); see stdin.py.
Mirrors the TS SDK's exec-stdin.ts."""

from __future__ import annotations

import threading
from typing import Any

from .client import HttpClient
from .errors import FailedPreconditionError
from .models import ExecResult
from .processes import OutputCallback, ProcessStream
from .stdin import StdinData, put_stdin


def exec_with_stdin(
    http: HttpClient, sandbox_route: str, body: dict[str, Any], stdin: StdinData, on_stdout: OutputCallback, on_stderr: OutputCallback
) -> ExecResult:
    """The command starts with stdin open; as soon as the start event names its pid, a
    thread sends `stdin` to it on a second connection while the output streams back on this
    one. A command that exits before reading all of it is not an error (like the reader of
    a shell pipe that stops early): the result is the command's."""
    request = {k: v for k, v in body.items() if k != "stdin"}
    request["keepStdinOpen"] = True
    failures: list[BaseException] = []
    feeders: list[threading.Thread] = []

    def feed(pid: int) -> None:
        try:
            put_stdin(http, f"{sandbox_route}/processes/{pid}", stdin, close=True)
        except FailedPreconditionError:
            pass  # the command exited or closed its stdin first: its result says the rest
        except BaseException as err:  # noqa: BLE001 - handed to the caller after the exit
            failures.append(err)

    def start(pid: int) -> None:
        if feeders:
            return  # one feed per command, whatever the stream says
        feeder = threading.Thread(target=feed, args=(pid,), name=f"warren-stdin-{pid}", daemon=True)
        feeders.append(feeder)
        feeder.start()

    stream = ProcessStream(http.request("POST", f"{sandbox_route}/exec", json=request, query={"stream": 1}), on_start=start)
    result = stream.consume(on_stdout, on_stderr)
    for feeder in feeders:
        feeder.join()
    # Any other failure (the source itself failed, the connection broke) means the command
    # saw a cut-short stdin: its result would mislead.
    if failures:
        raise failures[0]
    return result
