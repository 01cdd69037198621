"""Stdin of any size and content for commands: bytes, file objects and iterables of bytes
go as the raw body of PUT /processes/:pid/stdin, which the daemon feeds to the command as
it reads (paced by it, never buffered whole). Mirrors the TS SDK's stdin.ts."""

from __future__ import annotations

from typing import IO, Any, Iterable, Union

from .client import Body, HttpClient

StdinData = Union[str, bytes, bytearray, memoryview, IO[Any], Iterable[bytes]]


def stdin_body(data: StdinData) -> Body:
    """`data` as a request body: text as UTF-8, bytes as they are, file objects and
    iterables as they are read (a text file's pieces as UTF-8)."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data) if isinstance(data, bytearray) else data  # type: ignore[return-value]
    if hasattr(data, "read"):
        return data  # type: ignore[return-value]
    return (piece.encode("utf-8") if isinstance(piece, str) else piece for piece in data)


def put_stdin(http: HttpClient, process_route: str, data: StdinData, close: bool = True) -> int:
    """Streams `data` into a process's stdin, closing it at the end when `close`; returns
    the bytes written. Never sent twice: a retry after a broken connection could feed the
    command some bytes twice."""
    answer = http.json(
        "PUT",
        f"{process_route}/stdin",
        body=stdin_body(data),
        query={"close": close},
        headers={"Content-Type": "application/octet-stream"},
        replayable=False,
    )
    return int(answer["bytes"])
