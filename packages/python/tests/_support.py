"""Shared by the tests: imports `warren` from this checkout, a scriptable fake daemon for
unit tests, and the connection end-to-end tests use."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
import unittest
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union
from urllib.parse import parse_qsl, urlsplit

# The checkout's package, never an installed copy: these tests test this tree.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if TYPE_CHECKING:
    from warren import Sandbox


def e2e_connection() -> tuple[str, str]:
    """WARREN_URL and WARREN_API_KEY of the daemon the end-to-end tests run against. They
    fail (never skip) without them: a run that tested nothing must not look green."""
    missing = [name for name in ("WARREN_URL", "WARREN_API_KEY") if not os.environ.get(name)]
    if missing:
        raise RuntimeError(
            f"end-to-end tests need {' and '.join(missing)} set to a running warren daemon "
            "(npm test's tests/dist/python.test.js starts one and sets them)"
        )
    return os.environ["WARREN_URL"], os.environ["WARREN_API_KEY"]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    chunked: bool
    connection: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What the fake daemon answers. `chunks` are sent chunked, each flushed (a live
    stream); `declared` overrides Content-Length (more than sent: a cut-short body, after
    which the connection closes); `reset` drops the connection with no answer."""

    status: int = 200
    json: Any = None
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Iterable[bytes] | None = None
    declared: int | None = None
    reset: bool = False


Route = Union[Reply, Callable[[Recorded], Reply]]


class FakeDaemon:
    """An HTTP/1.1 keep-alive server on 127.0.0.1 that answers as the test says and records
    every request (and on which connection it came)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.routes: dict[tuple[str, str], Route] = {}
        self.connections = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake.connections += 1
                    self.connection_number = fake.connections

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
                body = self._read_chunked() if chunked else self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec = Recorded(
                    self.command,
                    parts.path,
                    dict(parse_qsl(parts.query, keep_blank_values=True)),
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    chunked,
                    self.connection_number,
                )
                with fake._lock:
                    fake.requests.append(rec)
                    route = fake.routes.get((self.command, parts.path))
                reply = route(rec) if callable(route) else route
                if reply is None:
                    reply = Reply(404, json={"error": {"code": "not_found", "message": f"no fake route for {self.command} {parts.path}"}})
                self._send(reply)

            def _read_chunked(self) -> bytes:
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()

            def _send(self, reply: Reply) -> None:
                if reply.reset:
                    # RST, no answer: what a client sees on a connection closed under it.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                body = reply.body if reply.json is None else json.dumps(reply.json).encode()
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.chunks is not None:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in reply.chunks:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(reply.declared if reply.declared is not None else len(body)))
                if reply.json is not None:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
                if reply.declared is not None and reply.declared != len(body):
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client that went away mid-answer is what some tests do on purpose.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def route(self, method: str, path: str, reply: Route) -> None:
        self.routes[(method, path)] = reply

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ndjson(*events: dict[str, Any]) -> list[bytes]:
    return [json.dumps(e).encode() + b"\n" for e in events]


def slowly(chunks: Iterable[bytes], delay: float) -> Iterable[bytes]:
    for chunk in chunks:
        time.sleep(delay)
        yield chunk


class E2ECase(unittest.TestCase):
    """A test against the real daemon named by WARREN_URL/WARREN_API_KEY; the SDK finds
    them in the environment like any program would. Sandboxes made with `create` are killed
    after the test, whatever happened."""

    @classmethod
    def setUpClass(cls) -> None:
        e2e_connection()

    def create(self, **options: Any) -> Sandbox:
        from warren import Sandbox

        metadata = {"suite": "python", "test": self.id().rsplit(".", 1)[-1][:128], **options.pop("metadata", {})}
        sbx = Sandbox.create(ttl_seconds=options.pop("ttl_seconds", 900), metadata=metadata, **options)
        self.addCleanup(kill_quietly, sbx)
        return sbx


def kill_quietly(sbx: Sandbox) -> None:
    from warren import NotFoundError

    try:
        sbx.kill()
    except NotFoundError:
        pass


def eventually(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Polls until `fn` returns something truthy (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
