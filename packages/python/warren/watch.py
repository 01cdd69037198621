"""File watches: changes inside a sandbox as they happen (GET /files/watch, NDJSON).

Reads the stream as the TS SDK's FileWatch does (packages/sdk/src/watch.ts): `ready` first,
keepalive lines skipped, an `error` line ends the watch with that error."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Optional

from .client import Response
from .errors import UnavailableError, WarrenError, error_from_body


@dataclass(frozen=True)
class WatchEvent:
    """`type`: create, write, remove, rename (with `old_path` when known), or overflow
    (changes were dropped because the reader was slow; look at the tree again, see
    `message`). Paths are absolute inside the sandbox."""

    type: str
    path: str = ""
    old_path: Optional[str] = None
    is_dir: Optional[bool] = None
    message: Optional[str] = None

    @staticmethod
    def from_wire(d: dict[str, Any]) -> WatchEvent:
        return WatchEvent(
            type=str(d.get("type")),
            path=str(d.get("path", "")),
            old_path=d.get("oldPath"),
            is_dir=d.get("isDir"),
            message=d.get("message"),
        )


class Watch:
    """An open watch: iterate it for WatchEvents; the iteration ends after `close()` and
    raises the error that ended the watch otherwise (NotFoundError: the watched path was
    removed; UnavailableError: the sandbox stopped). A context manager that closes it.
    `close()` may be called from another thread while one iterates.

        with sbx.files.watch("/work", recursive=True) as w:
            for event in w:
                print(event.type, event.path)
    """

    def __init__(self, response: Response) -> None:
        self._response = response
        self._lines = response.iter_ndjson()
        self._closed = False
        self._closed_by_caller = False
        self._reading = False
        self.path = ""
        self.is_dir = False
        # The first line says the watch is in place: read it before handing the watch out.
        try:
            first = next(self._lines)
        except StopIteration:
            raise UnavailableError("unavailable", "the watch stream ended before the watch was in place") from None
        if first.get("type") == "error":
            raise error_from_body(500, {"error": first})
        self.path = str(first.get("path", ""))
        self.is_dir = bool(first.get("isDir"))

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        if self._closed:
            raise StopIteration
        self._reading = True
        try:
            for event in self._lines:
                kind = event.get("type")
                if kind == "keepalive":
                    continue
                if kind == "error":
                    err = error_from_body(500, {"error": event})
                    self._end()
                    raise err
                return WatchEvent.from_wire(event)
        except (WarrenError, ValueError, AttributeError, OSError):
            # NetworkError, or what http.client raises when close() in another thread pulls
            # the socket away: the end the caller asked for.
            if self._closed_by_caller:
                self._response.close()
                raise StopIteration from None
            raise
        finally:
            self._reading = False
        self._end()
        if self._closed_by_caller:
            raise StopIteration
        raise UnavailableError("unavailable", "the watch stream ended without a reason (daemon restarted?)")

    def _end(self) -> None:
        self._closed = True
        self._response.close()

    def close(self) -> None:
        """Stops the watch inside the sandbox."""
        if self._closed:
            return
        self._closed = True
        self._closed_by_caller = True
        # A thread blocked reading the socket wakes only when the socket is shut down; it
        # then closes the response itself (closing it under the reader breaks http.client).
        conn = getattr(self._response, "_conn", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the other side
        if not self._reading:
            self._response.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncWatch:
    """`async for event in watch`, `await watch.aclose()`, `async with`; see Watch."""

    def __init__(self, watch: Watch) -> None:
        self.sync = watch

    @property
    def path(self) -> str:
        return self.sync.path

    @property
    def is_dir(self) -> bool:
        return self.sync.is_dir

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        event = await asyncio.to_thread(next, self.sync, None)
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        # Not in a thread: a worker may be blocked reading this watch, and close() is what
        # wakes it.
        self.sync.close()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
