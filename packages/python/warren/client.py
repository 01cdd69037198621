"""Low-level HTTP client: base URL, API key, a thread-safe keep-alive connection pool, JSON and
streaming requests, error mapping. Mirrors the TS SDK's client.ts."""

from __future__ import annotations

import http.client
import json as jsonlib
import os
import select
import socket
import ssl
import threading
from typing import IO, Any, Callable, Generator, Iterable, Iterator, Mapping, Union
from urllib.parse import quote, urlencode, urlsplit

from .errors import InvalidArgumentError, NetworkError, WarrenError, error_from_body

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_HOME = "/var/lib/warren"
# As fetch's (undici's) header and body timeouts in the TS SDK. Streams (exec, follow, builds)
# are kept alive by the daemon's keepalive line every 20 s, so only a silent daemon trips it.
DEFAULT_TIMEOUT = 300.0
CONNECT_TIMEOUT = 10.0
# Socket reads and writes in pieces this large: http.client's 8 KiB default costs a system
# call per 8 KiB, which is most of the client's CPU on a large file.
BLOCK_SIZE = 256 * 1024
# Idle connections kept per client; more threads than this still work, their extra
# connections are closed when returned.
MAX_IDLE = 32
# In-memory bodies above this go in pieces like streams, so a refusal is noticed early.
STREAM_BYTES_ABOVE = 1024 * 1024

# What Response.drain reads at most, and waits for, to keep a connection whose stream the
# caller is done with: the daemon ends an exec stream right after its exit event.
DRAIN_LIMIT = 64 * 1024
DRAIN_TIMEOUT = 1.0

Query = Mapping[str, Union[str, int, float, bool, None]]
# bytes: sent as is. A callable: makes a fresh body for each attempt (so it can be sent
# again on a stale connection). An iterable of bytes or a binary file object: sent once.
Body = Union[bytes, Callable[[], Union[Iterable[bytes], IO[bytes]]], Iterable[bytes], IO[bytes], None]

_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def resolve_url(explicit: str | None = None) -> str:
    """The daemon URL: `explicit`, else $WARREN_URL, else http://127.0.0.1:7070."""
    return (explicit or os.environ.get("WARREN_URL") or DEFAULT_URL).rstrip("/")


def resolve_api_key(explicit: str | None = None) -> str | None:
    """The API key: `explicit`, else $WARREN_API_KEY, else the admin key file under
    $WARREN_HOME (default /var/lib/warren) when it is readable, else None."""
    if explicit:
        return explicit
    if os.environ.get("WARREN_API_KEY"):
        return os.environ["WARREN_API_KEY"]
    home = os.environ.get("WARREN_HOME") or DEFAULT_HOME
    try:
        with open(os.path.join(home, "admin.key"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


class _TimeoutsMixin:
    """Connects within CONNECT_TIMEOUT, then waits up to the client's timeout per read."""

    sock: socket.socket | None
    read_timeout: float | None

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        if self.sock is not None:
            self.sock.settimeout(self.read_timeout)


class _HTTPConnection(_TimeoutsMixin, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_TimeoutsMixin, http.client.HTTPSConnection):
    pass


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the daemon meanwhile: an idle
    connection has nothing to read, so readable means EOF (or garbage)."""
    try:
        return _readable(conn)
    except (OSError, ValueError):
        return True


class _Pool:
    """Idle keep-alive connections to one daemon, shared by threads. A connection is only
    ever used by one request at a time: taken out for the exchange, given back once its
    response was read to the end."""

    def __init__(self, scheme: str, host: str, port: int, timeout: float | None, context: ssl.SSLContext | None = None) -> None:
        self._scheme = scheme
        self._context = context
        self._host = host
        self._port = port
        self._timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection and whether it was used before (only those can be stale)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if not _dropped(conn):
                return conn, True
            conn.close()
        if self._scheme == "https":
            fresh: http.client.HTTPConnection = _HTTPSConnection(self._host, self._port, timeout=CONNECT_TIMEOUT, blocksize=BLOCK_SIZE, context=self._context)
        else:
            fresh = _HTTPConnection(self._host, self._port, timeout=CONNECT_TIMEOUT, blocksize=BLOCK_SIZE)
        fresh.read_timeout = self._timeout
        return fresh, False

    def give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # A client dropped with idle connections closes them itself, not the sockets' finalizers
    # (which would warn about them).
    __del__ = close


class Response:
    """A 2xx answer whose body has not been read yet. Read it with `read()`, `json()`,
    `iter_chunks()` or `iter_lines()`; the connection goes back to the pool once the body
    was read to the end, and is closed by `close()` (or leaving a `with` block) before."""

    def __init__(self, client: HttpClient, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._client = client
        self._conn: http.client.HTTPConnection | None = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    @property
    def length(self) -> int | None:
        """The Content-Length the daemon declared, if any."""
        value = self._resp.getheader("content-length")
        return int(value) if value is not None and value.isdigit() else None

    def read(self) -> bytes:
        try:
            data = self._resp.read()
        except (http.client.HTTPException, OSError) as err:
            self.close()
            raise self._client.broken(err) from err
        self._finish()
        return data

    def json(self) -> Any:
        data = self.read()
        if self.status == 204 or not data:
            return None
        try:
            return jsonlib.loads(data)
        except ValueError as err:
            raise WarrenError("internal", f"the daemon answered with something that is not JSON: {data[:200]!r}") from err

    def iter_chunks(self, size: int = BLOCK_SIZE) -> Generator[bytes, None, None]:
        """The body in pieces of at most `size` bytes. A body cut short (the daemon or the
        sandbox went away, the file shrank while read) raises NetworkError."""
        try:
            while True:
                try:
                    chunk = self._resp.read(size)
                except (http.client.HTTPException, OSError) as err:
                    raise self._client.broken(err) from err
                if not chunk:
                    # read(n) returns b"" at a premature end too: only the bytes still due
                    # by the Content-Length tell a whole body from a cut one.
                    if self._resp.length:
                        raise NetworkError(f"the answer was cut short: {self._resp.length} of {self.length} bytes never came")
                    self._finish()
                    return
                yield chunk
        finally:
            self.close()

    def iter_lines(self) -> Generator[bytes, None, None]:
        """The body line by line as each line arrives (NDJSON streams)."""
        try:
            while True:
                try:
                    line = self._resp.readline()
                except (http.client.HTTPException, OSError) as err:
                    raise self._client.broken(err) from err
                if not line:
                    self._finish()
                    return
                yield line
        finally:
            self.close()

    def iter_ndjson(self) -> Generator[dict[str, Any], None, None]:
        for line in self.iter_lines():
            if line.strip():
                yield jsonlib.loads(line)

    def drain(self, timeout: float | None = None) -> None:
        """The caller is done with the body (a stream's final event came): reads what is left
        of it, normally just the end of the chunked body, so the connection goes back to the
        pool for the next request instead of being closed (a fresh connection per exec costs
        a connect, and the daemon an accept). More than DRAIN_LIMIT bytes left, or nothing
        for `timeout` seconds (default DRAIN_TIMEOUT), and the connection is closed instead."""
        conn = self._conn
        if conn is None:
            return
        sock = conn.sock
        try:
            if sock is not None:
                sock.settimeout(DRAIN_TIMEOUT if timeout is None else timeout)
            left = DRAIN_LIMIT
            while left > 0:
                data = self._resp.read(min(left, BLOCK_SIZE))
                if not data:
                    break
                left -= len(data)
            if sock is not None:
                sock.settimeout(self._client.timeout)
        except (http.client.HTTPException, OSError, ValueError):
            self.close()
            return
        if self._resp.isclosed():
            self._finish()
        else:
            self.close()

    def _finish(self) -> None:
        """The body was read to the end: the connection can carry the next request."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._client.pool.give(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Stops reading: a connection with unread body bytes can never be reused."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._resp.close()
            conn.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HttpClient:
    """One daemon (URL and API key). Thread-safe: any number of threads may make requests
    at once, each on its own pooled keep-alive connection."""

    def __init__(
        self, url: str | None = None, api_key: str | None = None, *, timeout: float | None = DEFAULT_TIMEOUT, ca_file: str | None = None
    ) -> None:
        """`ca_file`: certificates (PEM) to trust for an https URL, e.g. the daemon's
        self-signed one; default $WARREN_CA_FILE, else the system's."""
        self.url = resolve_url(url)
        self._api_key = resolve_api_key(api_key)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgumentError("invalid_argument", f"the daemon URL must be http://HOST[:PORT] (got {self.url!r})")
        self._base_path = parts.path.rstrip("/")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        ca = ca_file or os.environ.get("WARREN_CA_FILE")
        context = ssl.create_default_context(cafile=ca) if parts.scheme == "https" and ca else None
        self.pool = _Pool(parts.scheme, parts.hostname, port, timeout, context)
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"HttpClient(url={self.url!r})"

    def close(self) -> None:
        """Closes the idle connections (requests still work afterwards; they open new ones)."""
        self.pool.close()

    def broken(self, err: BaseException) -> NetworkError:
        if isinstance(err, http.client.IncompleteRead):
            return NetworkError(f"the answer from the warren daemon at {self.url} was cut short ({err.expected} more bytes were due)")
        if isinstance(err, (socket.timeout, TimeoutError)):
            return NetworkError(f"the warren daemon at {self.url} sent nothing for {self.timeout} s")
        return NetworkError(f"the connection to the warren daemon at {self.url} broke: {err!r}")

    def request(
        self,
        method: str,
        route: str,
        *,
        json: Any = None,
        body: Body = None,
        query: Query | None = None,
        headers: Mapping[str, str] | None = None,
        replayable: bool | None = None,
    ) -> Response:
        """Sends a request and returns the 2xx answer unread; raises the mapped WarrenError
        for any other status. `replayable` overrides whether a request that failed on a
        stale keep-alive connection may be sent again (default: reads, and uploads of bytes
        or of a body factory)."""
        target = self._base_path + route
        if query:
            pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if pairs:
                target += "?" + urlencode(pairs, quote_via=quote)
        hdrs: dict[str, str] = {"User-Agent": "warren-python/0.1", **(headers or {})}
        if self._api_key:
            hdrs["Authorization"] = f"Bearer {self._api_key}"
        if json is not None:
            hdrs["Content-Type"] = "application/json"
            body = jsonlib.dumps(json).encode("utf-8")
        can_replay = _replayable(method, body) if replayable is None else replayable
        for attempt in range(2):
            this_body = body() if callable(body) else body
            conn, reused = self.pool.take()
            try:
                resp = _exchange(conn, method, target, this_body, hdrs)
            except _STALE as err:
                conn.close()
                # A pooled keep-alive connection can be closed by the daemon just as a request
                # is put on it (its idle timeout). Like most HTTP clients, send once more on a
                # fresh connection when doing so cannot apply a change twice.
                if attempt == 0 and reused and can_replay:
                    continue
                raise NetworkError(f"cannot reach warren daemon at {self.url}: {err!r}") from err
            except (http.client.HTTPException, OSError) as err:
                conn.close()
                if isinstance(err, (socket.timeout, TimeoutError)):
                    raise self.broken(err) from err
                raise NetworkError(f"cannot reach warren daemon at {self.url}: {err!r}") from err
            except BaseException:
                # The body raised (an upload's source failed): the request is half sent.
                conn.close()
                raise
            if 200 <= resp.status < 300:
                return Response(self, conn, resp)
            raise self._error(conn, resp)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def json(self, method: str, route: str, **kwargs: Any) -> Any:
        """A request whose answer is JSON (None for 204)."""
        return self.request(method, route, **kwargs).json()

    def _error(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> WarrenError:
        request_id = resp.getheader("x-request-id")
        try:
            text = resp.read()
        except (http.client.HTTPException, OSError):
            text = b""
        if resp.isclosed() and not resp.will_close:
            self.pool.give(conn)
        else:
            conn.close()
        try:
            parsed = jsonlib.loads(text)
        except ValueError:
            parsed = {"error": {"message": text.decode("utf-8", "replace").strip() or f"HTTP {resp.status}"}}
        return error_from_body(resp.status, parsed, request_id=request_id)


def _exchange(conn: http.client.HTTPConnection, method: str, target: str, body: Any, headers: dict[str, str]) -> http.client.HTTPResponse:
    complete = True
    try:
        if body is None or (isinstance(body, (bytes, bytearray, memoryview)) and len(body) <= STREAM_BYTES_ABOVE):
            conn.request(method, target, body=body, headers=headers)
        else:
            complete = _send_streamed(conn, method, target, body, headers)
    except _STALE as err:
        # The daemon may have answered and closed before reading the whole body: that
        # answer is the one to report, if it came.
        try:
            resp = conn.getresponse()
        except (http.client.HTTPException, OSError):
            raise err from None
        resp.will_close = True
        return resp
    resp = conn.getresponse()
    if not complete:
        # The rest of the body was never sent: the connection cannot carry another request.
        resp.will_close = True
    return resp


def _send_streamed(conn: http.client.HTTPConnection, method: str, target: str, body: Any, headers: dict[str, str]) -> bool:
    """Sends a request whose body goes in pieces, watching for an answer between them. The
    daemon refuses some uploads at once (413 over the disk limit) and discards what still
    comes; stopping there saves sending the rest for nothing. False if it stopped early."""
    conn.putrequest(method, target, skip_accept_encoding=True)
    names = {k.lower() for k in headers}
    if "content-length" not in names and isinstance(body, (bytes, bytearray, memoryview)):
        headers = {**headers, "Content-Length": str(len(body))}
        names.add("content-length")
    chunked = "content-length" not in names
    for name, value in headers.items():
        conn.putheader(name, value)
    if chunked:
        conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for piece in _pieces(body):
        if not piece:
            continue
        if _readable(conn):
            return False
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    if chunked:
        conn.send(b"0\r\n\r\n")
    return True


def _pieces(body: Any) -> Iterator[bytes]:
    """A body as pieces of at most BLOCK_SIZE (views, not copies, of bytes in memory)."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        view = memoryview(body).cast("B")
        for at in range(0, len(view), BLOCK_SIZE):
            yield view[at : at + BLOCK_SIZE]
    elif hasattr(body, "read"):
        while piece := body.read(BLOCK_SIZE):
            yield piece.encode("utf-8") if isinstance(piece, str) else piece
    else:
        for piece in body:
            yield piece.encode("utf-8") if isinstance(piece, str) else piece


def _readable(conn: http.client.HTTPConnection) -> bool:
    """Whether the daemon has said something (an answer, or closing) on this connection."""
    sock = conn.sock
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def _replayable(method: str, body: Body) -> bool:
    """Whether sending the request again is harmless: reads, deletes (the daemon closes an
    idle connection only between requests, so a request that met a closed one was never
    handled; a kill or remove that did happen twice answers 404), and uploads of whole
    in-memory bodies or of body factories (a file write replaces the file atomically). An
    iterator or a file object that was passed in cannot be re-read."""
    if method in ("GET", "HEAD", "DELETE"):
        return True
    return method == "PUT" and (body is None or isinstance(body, (bytes, bytearray, memoryview)) or callable(body))


def _query_value(v: str | int | float | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


_clients: dict[tuple[str, str | None], HttpClient] = {}
_clients_lock = threading.Lock()


def get_client(url: str | None = None, api_key: str | None = None) -> HttpClient:
    """The shared client for a daemon and key (resolved from the environment as documented),
    so sandboxes made in many threads share one connection pool."""
    key = (resolve_url(url), resolve_api_key(api_key))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = HttpClient(key[0], key[1])
        return client
