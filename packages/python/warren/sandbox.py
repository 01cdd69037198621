"""The Sandbox class: the SDK's entry point. Mirrors the TS SDK's sandbox.ts."""

from __future__ import annotations

from typing import Any, List, Literal, Mapping, Sequence, Union, overload
from urllib.parse import quote

from .client import HttpClient, get_client
from .errors import CommandError, InternalError, InvalidArgumentError, NotFoundError
from .files import Files
from .models import CredentialRule, EgressEntry, ExecResult, NetworkPolicy, Resources, SandboxInfo, SnapshotInfo
from .exec_stdin import exec_with_stdin
from .processes import OutputCallback, Processes, ProcessHandle, ProcessStream
from .terminals import Terminals
from .stdin import StdinData

Command = Union[str, Sequence[str]]
Credentials = Sequence[Union[CredentialRule, Mapping[str, Any]]]


def _compact(d: Mapping[str, Any]) -> dict[str, Any]:
    """The request body without the options left unset, so the daemon's defaults apply."""
    return {k: v for k, v in d.items() if v is not None}


def _network(allow: Sequence[str] | None, credentials: Credentials | None) -> dict[str, Any] | None:
    if allow is None and credentials is None:
        return None
    if isinstance(allow, str):
        raise InvalidArgumentError("invalid_argument", "allow must be a list of rules, e.g. ['example.com:443'] (got a string)")
    policy: dict[str, Any] = {"allow": list(allow or [])}
    if credentials is not None:
        policy["credentials"] = [c.to_wire() if isinstance(c, CredentialRule) else dict(c) for c in credentials]
    return policy


def refuse_output_options(check: bool, on_stdout: object, on_stderr: object) -> None:
    """A background start returns before any output: options about the output belong to
    the handle's wait()."""
    if check or on_stdout is not None or on_stderr is not None:
        raise InvalidArgumentError("invalid_argument", "check, on_stdout and on_stderr do not apply to background=True: pass them to the handle's wait()")


class Sandbox:
    """A sandbox on a warren daemon. Make one with `Sandbox.create()` or attach to one with
    `Sandbox.connect(id)`; as a context manager it is killed when the block ends.

        with Sandbox.create(template="base", ttl_seconds=3600) as sbx:
            print(sbx.exec("echo hi").stdout)
    """

    def __init__(self, http: HttpClient, info: SandboxInfo) -> None:
        self._http = http
        self._info = info
        self.files = Files(http, info.id)
        # The same object under the name other sandbox SDKs use.
        self.filesystem = self.files
        self.processes = Processes(http, info.id)
        #: Terminals: `sandbox.pty.create(cols=..., rows=...)` (terminals.py).
        self.pty = Terminals(http, info.id)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self._info.state!r})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.kill()
        except NotFoundError:
            pass  # killed inside the block, expired or died: gone either way

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def info(self) -> SandboxInfo:
        """The last known state; `refresh()` gets a fresh one."""
        return self._info

    @property
    def _route(self) -> str:
        return f"/v1/sandboxes/{quote(self.id, safe='')}"

    @classmethod
    def create(
        cls,
        template: str | None = None,
        *,
        ttl_seconds: int | None = None,
        metadata: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        resources: Resources | Mapping[str, Any] | None = None,
        idle_seconds: int | None = None,
        snapshot: str | SnapshotInfo | None = None,
        allow: Sequence[str] | None = None,
        credentials: Credentials | None = None,
        databases: Sequence[str] | None = None,
        url: str | None = None,
        api_key: str | None = None,
    ) -> Sandbox:
        """Creates a sandbox and returns once it is ready for exec.

        template: default "base". ttl_seconds: killed this long after creation unless
        extended (default 3600). resources: Resources(cpus=, memory_mb=, pids=, disk_mb=).
        idle_seconds: hibernate by itself after this long without activity. snapshot: start
        from a snapshot (id or SnapshotInfo) instead. allow: egress rules (DOMAIN[:PORT],
        *.SUFFIX[:PORT], IP[/CIDR][:PORT]); none: the sandbox reaches nothing outside.
        credentials: [CredentialRule(host, headers)] the daemon adds to requests to host.
        databases: names of databases it uses, reached inside as NAME.db.warren:5432 with the
        URL in DATABASE_URL_NAME (the first also in DATABASE_URL); a name no database has is
        created for the sandbox and goes with it. A fork's children get their own branches.
        """
        http = get_client(url, api_key)
        body = _compact(
            {
                "template": template,
                "ttlSeconds": ttl_seconds,
                "metadata": dict(metadata) if metadata is not None else None,
                "env": dict(env) if env is not None else None,
                "resources": Resources.wire_from(resources) if resources is not None else None,
                "idleSeconds": idle_seconds,
                "snapshot": snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot,
                "network": _network(allow, credentials),
                "databases": list(databases) if databases is not None else None,
            }
        )
        return cls(http, SandboxInfo.from_wire(http.json("POST", "/v1/sandboxes", json=body)))

    @classmethod
    def connect(cls, sandbox_id: str, *, url: str | None = None, api_key: str | None = None) -> Sandbox:
        """Attaches to an existing sandbox by id."""
        http = get_client(url, api_key)
        return cls(http, SandboxInfo.from_wire(http.json("GET", f"/v1/sandboxes/{quote(sandbox_id, safe='')}")))

    @classmethod
    def list(
        cls,
        *,
        state: str | None = None,
        metadata: Mapping[str, str] | None = None,
        url: str | None = None,
        api_key: str | None = None,
    ) -> List[SandboxInfo]:
        """Sandboxes, optionally only those in `state` with all of `metadata`; follows pages."""
        http = get_client(url, api_key)
        query: dict[str, Any] = {"state": state}
        for k, v in (metadata or {}).items():
            query[f"metadata.{k}"] = v
        found: List[SandboxInfo] = []
        cursor: str | None = None
        while True:
            page = http.json("GET", "/v1/sandboxes", query={**query, "cursor": cursor})
            found.extend(SandboxInfo.from_wire(s) for s in page["sandboxes"])
            cursor = page.get("nextCursor")
            if not cursor:
                return found

    def refresh(self) -> SandboxInfo:
        self._info = SandboxInfo.from_wire(self._http.json("GET", self._route))
        return self._info

    @overload
    def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = ...,
        check: bool = ...,
        cwd: str | None = ...,
        env: Mapping[str, str] | None = ...,
        user: str | None = ...,
        stdin: StdinData | None = ...,
        on_stdout: OutputCallback = ...,
        on_stderr: OutputCallback = ...,
        background: Literal[False] = ...,
    ) -> ExecResult: ...

    @overload
    def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = ...,
        cwd: str | None = ...,
        env: Mapping[str, str] | None = ...,
        user: str | None = ...,
        stdin: StdinData | None = ...,
        background: Literal[True],
        tag: str | None = ...,
        keep_stdin_open: bool = ...,
    ) -> ProcessHandle: ...

    def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = None,
        check: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        stdin: StdinData | None = None,
        on_stdout: OutputCallback = None,
        on_stderr: OutputCallback = None,
        background: bool = False,
        tag: str | None = None,
        keep_stdin_open: bool = False,
    ) -> ExecResult | ProcessHandle:
        """Runs a command (a string run by bash -c, or an argv list) and returns its result:
        stdout, stderr, exit_code, timed_out, duration_ms. A non-zero exit is a result, not
        an error, unless check=True (then CommandError, carrying the result). on_stdout and
        on_stderr are called with output as it comes. timeout_seconds kills the command and
        everything it started. With background=True, returns a ProcessHandle at once.

            r = sbx.exec("npm test", timeout_seconds=900)
            sbx.exec(["git", "status"], check=True)
        """
        # Text goes in the request; bytes, file objects and iterables follow it (stdin.py).
        streamed = stdin if stdin is not None and not isinstance(stdin, str) else None
        body = self._exec_body(command, timeout_seconds, cwd, env, user, stdin if isinstance(stdin, str) else None)
        route = f"{self._route}/exec"
        if background:
            refuse_output_options(check, on_stdout, on_stderr)
            keep_open = keep_stdin_open or streamed is not None
            body.update(_compact({"background": True, "tag": tag, "keepStdinOpen": keep_open or None}))
            handle = ProcessHandle(self._http, self.id, int(self._http.json("POST", route, json=body)["pid"]))
            if streamed is not None:
                handle.write_stdin(streamed, close=not keep_stdin_open)
            return handle
        if streamed is not None:
            result = exec_with_stdin(self._http, self._route, body, streamed, on_stdout, on_stderr)
            if check and (result.exit_code != 0 or result.timed_out):
                raise CommandError(command if isinstance(command, str) else " ".join(command), result)
            return result
        # Always the streaming form: its keepalives let commands run longer than any read
        # timeout, and output can be passed on as it comes.
        stream = ProcessStream(self._http.request("POST", route, json=body, query={"stream": 1}))
        result = stream.consume(on_stdout, on_stderr)
        if check and (result.exit_code != 0 or result.timed_out):
            raise CommandError(command if isinstance(command, str) else " ".join(command), result)
        return result

    @staticmethod
    def _exec_body(
        command: Command,
        timeout_seconds: float | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
        user: str | None,
        stdin: str | None,
    ) -> dict[str, Any]:
        if isinstance(command, (bytes, bytearray)):
            raise InvalidArgumentError("invalid_argument", "command must be a str (run by bash) or a list of str (argv), not bytes")
        target: dict[str, Any] = {"cmd": command} if isinstance(command, str) else {"argv": list(command)}
        return _compact(
            {
                **target,
                "cwd": cwd,
                "env": dict(env) if env is not None else None,
                "user": user,
                "stdin": stdin,
                "timeoutSeconds": timeout_seconds,
            }
        )

    def set_ttl(self, seconds: int) -> SandboxInfo:
        """Extends the dead-man's switch: the sandbox now expires `seconds` from now."""
        self._info = SandboxInfo.from_wire(self._http.json("POST", f"{self._route}/ttl", json={"ttlSeconds": seconds}))
        return self._info

    def hibernate(self) -> SandboxInfo:
        """Saves memory, processes and files to disk and frees the sandbox's RAM and host
        processes. Any later exec, files or processes call resumes it transparently."""
        self._info = SandboxInfo.from_wire(self._http.json("POST", f"{self._route}/hibernate"))
        return self._info

    def resume(self) -> SandboxInfo:
        """Resumes a hibernated sandbox now (any call would also do it)."""
        self._info = SandboxInfo.from_wire(self._http.json("POST", f"{self._route}/resume"))
        return self._info

    def fork(self, *, metadata: Mapping[str, str] | None = None, ttl_seconds: int | None = None, idle_seconds: int | None = None) -> Sandbox:
        """One new sandbox that continues from this instant of this one: same memory,
        processes and files, its own id and copy-on-write files. This one keeps running."""
        children = self.fork_tree(1, metadata=metadata, ttl_seconds=ttl_seconds, idle_seconds=idle_seconds)
        if not children:
            raise InternalError("internal", "the daemon answered a fork of one with no sandbox")
        return children[0]

    def fork_tree(
        self, count: int, *, metadata: Mapping[str, str] | None = None, ttl_seconds: int | None = None, idle_seconds: int | None = None
    ) -> List[Sandbox]:
        """`count` new sandboxes from the same instant of this one, restored in parallel:
        best-of-N attempts from one warm state. All or none: if one child fails, none is
        kept. Children share this sandbox's connection pool (safe across threads)."""
        body = _compact(
            {"count": count, "metadata": dict(metadata) if metadata is not None else None, "ttlSeconds": ttl_seconds, "idleSeconds": idle_seconds}
        )
        result = self._http.json("POST", f"{self._route}/fork", json=body)
        return [Sandbox(self._http, SandboxInfo.from_wire(s)) for s in result["sandboxes"]]

    def snapshot(self, *, metadata: Mapping[str, str] | None = None) -> SnapshotInfo:
        """A durable save of this sandbox (memory, processes, files) that keeps running;
        start new sandboxes from it with `Sandbox.create(snapshot=snap.id)`."""
        body = _compact({"metadata": dict(metadata) if metadata is not None else None})
        return SnapshotInfo.from_wire(self._http.json("POST", f"{self._route}/snapshots", json=body))

    def get_url(self, port: int, *, expires_in_seconds: int | None = None) -> str:
        """A URL on the daemon for a port inside the sandbox (HTTP and WebSocket), carrying
        a signed token; traffic resumes a hibernated sandbox."""
        body = _compact({"expiresInSeconds": expires_in_seconds})
        return str(self._http.json("POST", f"{self._route}/ports/{int(port)}/url", json=body)["url"])

    def forward_port(self, port: int, *, host_port: int | None = None) -> dict[str, Any]:
        """A TCP listener on the host's loopback whose connections reach `port` inside the
        sandbox (psql, redis-cli): `{"port", "host": "127.0.0.1", "hostPort", "createdAt"}`.
        It lasts until `close_forward`, the sandbox's end or the daemon's restart."""
        body = _compact({"hostPort": host_port})
        return dict(self._http.json("POST", f"{self._route}/ports/{int(port)}/forward", json=body))

    def forwards(self) -> list[dict[str, Any]]:
        """The sandbox's open TCP forwards."""
        return list(self._http.json("GET", f"{self._route}/forwards")["forwards"])

    def close_forward(self, port: int) -> None:
        """Closes the forward of `port` and its connections."""
        self._http.json("DELETE", f"{self._route}/ports/{int(port)}/forward")

    def databases(self) -> list[dict[str, Any]]:
        """The databases the sandbox uses: `{"alias", "name", "owned", "host", "port", "env"}` each."""
        return list(self._http.json("GET", f"{self._route}/databases")["databases"])

    def attach_database(self, name: str) -> dict[str, Any]:
        """The sandbox uses database `name` from now on (created for it unless one of that name
        exists), reached inside as `name.db.warren:5432`. The answer's "url", with the
        password, is what to give its commands: DATABASE_URL is set only at create."""
        return dict(self._http.json("POST", f"{self._route}/databases", json={"name": name}))

    def create_token(self, scopes: list[str], ttl_seconds: int | None = None) -> dict[str, Any]:
        """A token for this sandbox only, to hand to an agent instead of a key: it can do what
        its scopes say ("read", "exec", "files", "manage") here and nothing anywhere else,
        until it expires (default 1 hour) or is revoked. The secret is in "token", this once;
        use it as the api_key."""
        body: dict[str, Any] = {"scopes": scopes}
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        return dict(self._http.json("POST", f"{self._route}/tokens", json=body))

    def tokens(self) -> list[dict[str, Any]]:
        """This sandbox's tokens (never their secrets)."""
        return list(self._http.json("GET", f"{self._route}/tokens")["tokens"])

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        """The token stops working at once."""
        return dict(self._http.json("DELETE", f"{self._route}/tokens/{quote(token_id, safe='')}"))

    def get_network(self) -> NetworkPolicy:
        """The egress policy. Credential header values are never returned ("[redacted]")."""
        return NetworkPolicy.from_wire(self._http.json("GET", f"{self._route}/network"))

    def set_network(self, allow: Sequence[str] | NetworkPolicy, credentials: Credentials | None = None) -> NetworkPolicy:
        """Replaces the egress policy (`allow=[]` refuses everything) and the credentials
        (absent: none). Open connections end; new ones follow the new rules.

            sbx.set_network(["@npm", "*.github.com:443"])
        """
        if isinstance(allow, NetworkPolicy):
            policy = _network(allow.allow, credentials if credentials is not None else allow.credentials)
        else:
            policy = _network(allow, credentials)
        return NetworkPolicy.from_wire(self._http.json("PUT", f"{self._route}/network", json=policy))

    def egress_log(self, *, after: int | None = None, limit: int | None = None) -> List[EgressEntry]:
        """Egress attempts (allowed and refused), oldest first, after the entry id `after`."""
        body = self._http.json("GET", f"{self._route}/egress", query={"after": after, "limit": limit})
        return [EgressEntry.from_wire(e) for e in body["entries"]]

    def call_tool(
        self,
        name: str,
        input: Mapping[str, Any],
        *,
        cwd: str | None = None,
        max_output_chars: int | None = None,
        session: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """One call of an agent tool (`bash`, `str_replace_based_edit_tool`) run by the
        daemon; a failed action comes back as `{"is_error": True, "error": ...}`, a malformed
        input raises InvalidArgumentError and an unknown tool NotFoundError. Most callers want
        `warren.tools.Toolset`, which returns those as results too."""
        body = _compact({"input": dict(input), "cwd": cwd, "maxOutputChars": max_output_chars, "session": session, "user": user})
        result: dict[str, Any] = self._http.json("POST", f"{self._route}/tools/{quote(name, safe='')}", json=body)
        return result

    def kill(self) -> None:
        """Destroys the sandbox and everything in it."""
        self._http.json("DELETE", self._route)
