"""Terminals in a sandbox (docs/terminals.md): a command on a pseudo-terminal. The TS SDK
drives them over a WebSocket; the standard library has no WebSocket client, so this module
uses the daemon's plain HTTP routes (/terminals): input and control by POST, output as an
NDJSON stream with offsets. The terminal lives in the sandbox either way: a Terminal handle
is only its id, and any client may drive the same terminal at the same time."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Callable, Dict, Generator, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

from .client import HttpClient
from .errors import UnavailableError, error_from_body
from .models import Model


@dataclass
class TerminalInfo(Model):
    id: str = ""
    pid: int = 0
    command: list[str] = field(default_factory=list)
    user: str = ""
    cwd: str = ""
    cols: int = 0
    rows: int = 0
    running: bool = False
    exit_code: int | None = None
    started_at: str = ""
    ended_at: str | None = None
    output_bytes: int = 0
    attached: int = 0


@dataclass
class TerminalOutput:
    """What a terminal kept, from `offset` (the oldest byte kept if the one asked for is
    gone) to `next_offset`; `exit_code` once it has exited."""

    data: bytes
    offset: int
    next_offset: int
    exited: bool
    exit_code: int | None


class Terminal:
    """One terminal, by id (from `sandbox.pty.create` or `.list`).

        term = sbx.pty.create(cols=120, rows=40)
        term.write("make test\\r")
        code = term.wait(on_data=lambda b: sys.stdout.buffer.write(b))
    """

    def __init__(self, http: HttpClient, sandbox_id: str, terminal_id: str, info: TerminalInfo | None = None) -> None:
        self._http = http
        self.sandbox_id = sandbox_id
        self.id = terminal_id
        #: As created or last `refresh()`ed.
        self.info = info
        #: After a followed stream ended with the command's exit: its exit code.
        self.exit_code: int | None = None

    def __repr__(self) -> str:
        return f"Terminal(sandbox_id={self.sandbox_id!r}, id={self.id!r})"

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{quote(self.sandbox_id, safe='')}/terminals/{quote(self.id, safe='')}"

    def refresh(self) -> TerminalInfo:
        self.info = TerminalInfo.from_wire(self._http.json("GET", self._base))
        return self.info

    def write(self, data: Union[str, bytes]) -> None:
        """Keystrokes: a str goes as UTF-8 ("\\r" is Enter, "\\x03" is Ctrl-C)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._http.json("POST", f"{self._base}/input", json={"data": base64.b64encode(raw).decode("ascii")})

    def resize(self, cols: int, rows: int) -> None:
        """New size in cells (1 to 1000 each); the command gets SIGWINCH."""
        self._http.json("POST", f"{self._base}/resize", json={"cols": cols, "rows": rows})

    def signal(self, signal: str) -> None:
        """A signal for the terminal's foreground process group, as its key would send."""
        self._http.json("POST", f"{self._base}/signal", json={"signal": signal})

    def kill(self) -> None:
        """Kills the command and everything it started (exit code 137); a finished terminal is forgotten."""
        self._http.json("POST", f"{self._base}/kill")

    def output(self, offset: int | None = None) -> TerminalOutput:
        """What the terminal kept (the last 64 KiB), from `offset` on, without waiting."""
        parts: list[bytes] = []
        start: int | None = None
        end = offset or 0
        exited = False
        exit_code = None
        with self._http.request("GET", f"{self._base}/output", query={"offset": offset}) as res:
            for event in res.iter_ndjson():
                kind = event.get("type")
                if kind == "output":
                    chunk = base64.b64decode(str(event.get("data", "")))
                    if start is None:
                        start = int(event.get("offset", 0))
                    parts.append(chunk)
                    end = int(event.get("offset", 0)) + len(chunk)
                elif kind == "exit":
                    exited = True
                    exit_code = event.get("exitCode")
                    end = int(event.get("offset", end))
        return TerminalOutput(b"".join(parts), end if start is None else start, end, exited, exit_code)

    def stream(self, offset: int | None = None) -> Generator[bytes, None, None]:
        """Yields output as it comes (the kept output from `offset` first) until the command
        exits; then `exit_code` is set. Closing the generator early stops following only."""
        with self._http.request("GET", f"{self._base}/output", query={"offset": offset, "follow": 1}) as res:
            for event in res.iter_ndjson():
                kind = event.get("type")
                if kind == "output":
                    yield base64.b64decode(str(event.get("data", "")))
                elif kind == "exit":
                    self.exit_code = event.get("exitCode")
                    return
                elif kind == "error":
                    raise error_from_body(500, {"error": event})
        raise UnavailableError("unavailable", f"terminal {self.id}: the output stream ended without an exit (daemon restarted?)")

    def wait(self, on_data: Optional[Callable[[bytes], object]] = None, offset: int | None = None) -> int | None:
        """Follows the output until the command exits; returns its exit code (128+N: killed by signal N)."""
        for chunk in self.stream(offset):
            if on_data is not None:
                on_data(chunk)
        return self.exit_code


class Terminals:
    """`sandbox.pty`: open terminals, list them, get one by id. Mirrors the TS SDK's `sbx.pty`."""

    def __init__(self, http: HttpClient, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{quote(self._sandbox_id, safe='')}/terminals"

    def create(
        self,
        cols: int = 80,
        rows: int = 24,
        cmd: Union[str, Sequence[str], None] = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> Terminal:
        """Opens a terminal: `cmd` as a command line (run by `bash -lc`) or an argv list;
        default the user's login shell."""
        body: Dict[str, object] = {"cols": cols, "rows": rows}
        if isinstance(cmd, str):
            body["cmd"] = cmd
        elif cmd is not None:
            body["argv"] = list(cmd)
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        if user is not None:
            body["user"] = user
        info = TerminalInfo.from_wire(self._http.json("POST", self._base, json=body))
        return Terminal(self._http, self._sandbox_id, info.id, info)

    def connect(self, terminal_id: str) -> Terminal:
        """A handle to a terminal opened earlier, by this or any client."""
        return Terminal(self._http, self._sandbox_id, terminal_id)

    def list(self) -> List[TerminalInfo]:
        return [TerminalInfo.from_wire(t) for t in self._http.json("GET", self._base)["terminals"]]
