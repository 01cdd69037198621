"""AsyncSandbox: the Sandbox API as coroutines, for asyncio programs.

Each call runs the sync client in a worker thread (asyncio.to_thread): the sync client is
thread-safe and pooled, and the daemon's API is request/response or NDJSON, so threads cost
nothing that matters next to a sandbox call. Output callbacks (plain functions or coroutine
functions) run on the event loop, in order, before the call returns; an exception in one
ends the call with it."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterable
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, Iterator, List, Literal, Mapping, Optional, Sequence, TypeVar, Union, overload

from .files import BinaryWriter, FileReader, Files, WriteData
from .models import DirUploadResult, EgressEntry, ExecResult, FileStat, NetworkPolicy, OutputChunk, ProcessInfo, ProcessOutput, Resources, SandboxInfo, SnapshotInfo, WriteResult
from .processes import ProcessHandle, Processes, ProcessStream
from .sandbox import Command, Credentials, Sandbox, refuse_output_options
from .stdin import StdinData
from .terminals import Terminal, TerminalInfo, TerminalOutput, Terminals
from .watch import AsyncWatch

T = TypeVar("T")
AsyncOutputCallback = Optional[Callable[[str], Union[object, Awaitable[object]]]]


def _on_loop(callback: AsyncOutputCallback, loop: asyncio.AbstractEventLoop) -> Callable[[str], None] | None:
    """A callback for the worker thread that runs `callback` on the loop and waits for it."""
    if callback is None:
        return None
    cb = callback

    async def run(data: str) -> None:
        result = cb(data)
        if inspect.isawaitable(result):
            await result

    def call(data: str) -> None:
        asyncio.run_coroutine_threadsafe(run(data), loop).result()

    return call


_DONE = object()


async def _iterate(it: Iterator[T]) -> AsyncIterator[T]:
    """A sync iterator (a network read per step) as an async one, one step per thread hop."""
    def step() -> T | object:
        return next(it, _DONE)

    while True:
        item = await asyncio.to_thread(step)
        if item is _DONE:
            return
        yield item  # type: ignore[misc]


class AsyncProcessStream:
    """`async for chunk in stream` for OutputChunks, then `.result`; see ProcessStream."""

    def __init__(self, stream: ProcessStream) -> None:
        self._stream = stream
        self._chunks = _iterate(stream)

    @property
    def result(self) -> ExecResult | None:
        return self._stream.result

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks

    async def aclose(self) -> None:
        await asyncio.to_thread(self._stream.close)

    async def __aenter__(self) -> AsyncProcessStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncProcessHandle:
    """A background process; see ProcessHandle."""

    def __init__(self, handle: ProcessHandle) -> None:
        self.sync = handle
        self.sandbox_id = handle.sandbox_id
        self.pid = handle.pid

    def __repr__(self) -> str:
        return f"AsyncProcessHandle(sandbox_id={self.sandbox_id!r}, pid={self.pid})"

    async def output(self, stdout_offset: int | None = None, stderr_offset: int | None = None) -> ProcessOutput:
        return await asyncio.to_thread(self.sync.output, stdout_offset, stderr_offset)

    async def follow(self, stdout_offset: int | None = None, stderr_offset: int | None = None) -> AsyncProcessStream:
        return AsyncProcessStream(await asyncio.to_thread(self.sync.follow, stdout_offset, stderr_offset))

    async def wait(
        self,
        on_stdout: AsyncOutputCallback = None,
        on_stderr: AsyncOutputCallback = None,
        stdout_offset: int | None = None,
        stderr_offset: int | None = None,
    ) -> ExecResult:
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(self.sync.wait, _on_loop(on_stdout, loop), _on_loop(on_stderr, loop), stdout_offset, stderr_offset)

    async def send_stdin(self, data: str | bytes) -> None:
        await asyncio.to_thread(self.sync.send_stdin, data)

    async def close_stdin(self) -> None:
        await asyncio.to_thread(self.sync.close_stdin)

    async def write_stdin(self, data: AsyncStdinData, close: bool = True) -> int:
        """See ProcessHandle.write_stdin; also takes an async iterable of bytes."""
        return await asyncio.to_thread(self.sync.write_stdin, _blocking_stdin(data, asyncio.get_running_loop()), close)

    async def signal(self, signal: str = "SIGTERM") -> None:
        await asyncio.to_thread(self.sync.signal, signal)

    async def kill(self) -> None:
        await asyncio.to_thread(self.sync.kill)


class AsyncProcesses:
    def __init__(self, processes: Processes) -> None:
        self.sync = processes

    async def list(self) -> List[ProcessInfo]:
        return await asyncio.to_thread(self.sync.list)

    def get(self, pid: int) -> AsyncProcessHandle:
        return AsyncProcessHandle(self.sync.get(pid))


class AsyncTerminal:
    """One terminal as coroutines; see Terminal. `async for chunk in term.stream()`."""

    def __init__(self, terminal: Terminal) -> None:
        self.sync = terminal

    def __repr__(self) -> str:
        return f"AsyncTerminal(sandbox_id={self.sync.sandbox_id!r}, id={self.sync.id!r})"

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def info(self) -> TerminalInfo | None:
        return self.sync.info

    @property
    def exit_code(self) -> int | None:
        return self.sync.exit_code

    async def refresh(self) -> TerminalInfo:
        return await asyncio.to_thread(self.sync.refresh)

    async def write(self, data: Union[str, bytes]) -> None:
        await asyncio.to_thread(self.sync.write, data)

    async def resize(self, cols: int, rows: int) -> None:
        await asyncio.to_thread(self.sync.resize, cols, rows)

    async def signal(self, signal: str) -> None:
        await asyncio.to_thread(self.sync.signal, signal)

    async def kill(self) -> None:
        await asyncio.to_thread(self.sync.kill)

    async def output(self, offset: int | None = None) -> TerminalOutput:
        return await asyncio.to_thread(self.sync.output, offset)

    def stream(self, offset: int | None = None) -> AsyncIterator[bytes]:
        """Output as it comes until the command exits; then `exit_code` is set."""
        return _iterate(self.sync.stream(offset))

    async def wait(self, on_data: Optional[Callable[[bytes], Union[object, Awaitable[object]]]] = None, offset: int | None = None) -> int | None:
        """Follows the output until the exit and returns the exit code; `on_data` may be a coroutine function."""
        async for chunk in self.stream(offset):
            if on_data is not None:
                result = on_data(chunk)
                if inspect.isawaitable(result):
                    await result
        return self.sync.exit_code


class AsyncTerminals:
    """`AsyncSandbox.pty`; see Terminals."""

    def __init__(self, terminals: Terminals) -> None:
        self.sync = terminals

    async def create(
        self,
        cols: int = 80,
        rows: int = 24,
        cmd: Union[str, Sequence[str], None] = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> AsyncTerminal:
        return AsyncTerminal(await asyncio.to_thread(self.sync.create, cols, rows, cmd, cwd, env, user))

    def connect(self, terminal_id: str) -> AsyncTerminal:
        return AsyncTerminal(self.sync.connect(terminal_id))

    async def list(self) -> List[TerminalInfo]:
        return await asyncio.to_thread(self.sync.list)


class AsyncFileReader:
    """`async for chunk in reader`, or `await reader.read(n)`; see FileReader."""

    def __init__(self, reader: FileReader) -> None:
        self._reader = reader
        self._chunks = _iterate(iter(reader))
        self.size = reader.size

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def read(self, n: int = -1) -> bytes:
        return await asyncio.to_thread(self._reader.read, n)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._reader.close)

    async def __aenter__(self) -> AsyncFileReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


AsyncWriteData = Union[WriteData, AsyncIterable[bytes]]
AsyncStdinData = Union[StdinData, AsyncIterable[bytes]]


def _blocking_stdin(data: AsyncStdinData, loop: asyncio.AbstractEventLoop) -> StdinData:
    """Stdin the sync client can read in its worker thread (an async iterable is pulled from the loop)."""
    return _pull_from_loop(data, loop) if isinstance(data, AsyncIterable) else data


class AsyncFiles:
    """`sandbox.files` (also `sandbox.filesystem`) as coroutines; see Files. `write` also
    takes an async iterable of bytes."""

    def __init__(self, files: Files) -> None:
        self.sync = files

    async def read(self, path: str, user: str | None = None) -> bytes:
        return await asyncio.to_thread(self.sync.read, path, user)

    async def read_text(self, path: str, user: str | None = None, encoding: str = "utf-8") -> str:
        return await asyncio.to_thread(self.sync.read_text, path, user, encoding)

    async def read_stream(self, path: str, user: str | None = None) -> AsyncFileReader:
        return AsyncFileReader(await asyncio.to_thread(self.sync.read_stream, path, user))

    async def download(self, path: str, dest: BinaryWriter | str | os.PathLike[str], user: str | None = None) -> int:
        return await asyncio.to_thread(self.sync.download, path, dest, user)

    async def write(self, path: str, data: AsyncWriteData, user: str | None = None, mode: int | None = None) -> WriteResult:
        source: WriteData = _pull_from_loop(data, asyncio.get_running_loop()) if isinstance(data, AsyncIterable) else data
        return await asyncio.to_thread(self.sync.write, path, source, user, mode)

    async def stat(self, path: str, user: str | None = None) -> FileStat:
        return await asyncio.to_thread(self.sync.stat, path, user)

    async def exists(self, path: str, user: str | None = None) -> bool:
        return await asyncio.to_thread(self.sync.exists, path, user)

    async def remove(self, path: str, user: str | None = None) -> bool:
        return await asyncio.to_thread(self.sync.remove, path, user)

    async def mkdir(self, path: str, user: str | None = None) -> FileStat:
        return await asyncio.to_thread(self.sync.mkdir, path, user)

    async def move(self, src: str, dest: str, user: str | None = None) -> FileStat:
        return await asyncio.to_thread(self.sync.move, src, dest, user)

    async def list(self, path: str, depth: int | None = None, user: str | None = None) -> List[FileStat]:
        return await asyncio.to_thread(self.sync.list, path, depth, user)

    async def upload_dir(self, local_dir: str | os.PathLike[str], remote_dir: str, user: str | None = None, exists: str | None = None) -> DirUploadResult:
        return await asyncio.to_thread(self.sync.upload_dir, local_dir, remote_dir, user, exists)

    async def download_dir(self, remote_dir: str, local_dir: str | os.PathLike[str], user: str | None = None, exists: str = "merge") -> None:
        await asyncio.to_thread(self.sync.download_dir, remote_dir, local_dir, user, exists)

    async def write_many(self, entries: Iterable[Mapping[str, Any]], user: str | None = None) -> List[WriteResult]:
        return await asyncio.to_thread(self.sync.write_many, entries, user)

    async def watch(self, path: str, recursive: bool = False, user: str | None = None) -> AsyncWatch:
        """See Files.watch: `async for event in await sbx.files.watch(...)`."""
        return AsyncWatch(await asyncio.to_thread(self.sync.watch, path, recursive, user))


def _pull_from_loop(source: AsyncIterable[bytes], loop: asyncio.AbstractEventLoop) -> Iterator[bytes]:
    """An async iterable read from the worker thread: each next chunk is awaited on the loop."""
    it = source.__aiter__()

    async def step() -> Any:
        try:
            return await it.__anext__()
        except StopAsyncIteration:
            return _DONE

    while True:
        chunk = asyncio.run_coroutine_threadsafe(step(), loop).result()
        if chunk is _DONE:
            return
        yield chunk


class AsyncSandbox:
    """Sandbox for asyncio: the same methods as coroutines, `async with` kills on exit.

        async with await AsyncSandbox.create(template="base") as sbx:
            r = await sbx.exec("echo hi", on_stdout=print)
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self.sync = sandbox
        self.files = AsyncFiles(sandbox.files)
        self.filesystem = self.files
        self.processes = AsyncProcesses(sandbox.processes)
        self.pty = AsyncTerminals(sandbox.pty)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, state={self.info.state!r})"

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.sync.__exit__, None, None, None)

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def info(self) -> SandboxInfo:
        return self.sync.info

    @classmethod
    async def create(
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
    ) -> AsyncSandbox:
        sandbox = await asyncio.to_thread(
            Sandbox.create,
            template,
            ttl_seconds=ttl_seconds,
            metadata=metadata,
            env=env,
            resources=resources,
            idle_seconds=idle_seconds,
            snapshot=snapshot,
            allow=allow,
            credentials=credentials,
            databases=databases,
            url=url,
            api_key=api_key,
        )
        return cls(sandbox)

    @classmethod
    async def connect(cls, sandbox_id: str, *, url: str | None = None, api_key: str | None = None) -> AsyncSandbox:
        return cls(await asyncio.to_thread(Sandbox.connect, sandbox_id, url=url, api_key=api_key))

    @classmethod
    async def list(
        cls, *, state: str | None = None, metadata: Mapping[str, str] | None = None, url: str | None = None, api_key: str | None = None
    ) -> List[SandboxInfo]:
        return await asyncio.to_thread(Sandbox.list, state=state, metadata=metadata, url=url, api_key=api_key)

    async def refresh(self) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.refresh)

    @overload
    async def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = ...,
        check: bool = ...,
        cwd: str | None = ...,
        env: Mapping[str, str] | None = ...,
        user: str | None = ...,
        stdin: AsyncStdinData | None = ...,
        on_stdout: AsyncOutputCallback = ...,
        on_stderr: AsyncOutputCallback = ...,
        background: Literal[False] = ...,
    ) -> ExecResult: ...

    @overload
    async def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = ...,
        cwd: str | None = ...,
        env: Mapping[str, str] | None = ...,
        user: str | None = ...,
        stdin: AsyncStdinData | None = ...,
        background: Literal[True],
        tag: str | None = ...,
        keep_stdin_open: bool = ...,
    ) -> AsyncProcessHandle: ...

    async def exec(
        self,
        command: Command,
        *,
        timeout_seconds: float | None = None,
        check: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        stdin: AsyncStdinData | None = None,
        on_stdout: AsyncOutputCallback = None,
        on_stderr: AsyncOutputCallback = None,
        background: bool = False,
        tag: str | None = None,
        keep_stdin_open: bool = False,
    ) -> ExecResult | AsyncProcessHandle:
        """See Sandbox.exec; on_stdout/on_stderr may be coroutine functions, stdin an async iterable of bytes."""
        sbx = self.sync
        sync_stdin = None if stdin is None else _blocking_stdin(stdin, asyncio.get_running_loop())
        if background:
            refuse_output_options(check, on_stdout, on_stderr)
            handle = await asyncio.to_thread(
                lambda: sbx.exec(
                    command,
                    background=True,
                    tag=tag,
                    keep_stdin_open=keep_stdin_open,
                    timeout_seconds=timeout_seconds,
                    cwd=cwd,
                    env=env,
                    user=user,
                    stdin=sync_stdin,
                )
            )
            return AsyncProcessHandle(handle)
        loop = asyncio.get_running_loop()
        out, err = _on_loop(on_stdout, loop), _on_loop(on_stderr, loop)
        return await asyncio.to_thread(
            lambda: sbx.exec(command, timeout_seconds=timeout_seconds, check=check, cwd=cwd, env=env, user=user, stdin=sync_stdin, on_stdout=out, on_stderr=err)
        )

    async def set_ttl(self, seconds: int) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.set_ttl, seconds)

    async def hibernate(self) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.hibernate)

    async def resume(self) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.resume)

    async def fork(self, *, metadata: Mapping[str, str] | None = None, ttl_seconds: int | None = None, idle_seconds: int | None = None) -> AsyncSandbox:
        child = await asyncio.to_thread(self.sync.fork, metadata=metadata, ttl_seconds=ttl_seconds, idle_seconds=idle_seconds)
        return AsyncSandbox(child)

    async def fork_tree(
        self, count: int, *, metadata: Mapping[str, str] | None = None, ttl_seconds: int | None = None, idle_seconds: int | None = None
    ) -> List[AsyncSandbox]:
        children = await asyncio.to_thread(self.sync.fork_tree, count, metadata=metadata, ttl_seconds=ttl_seconds, idle_seconds=idle_seconds)
        return [AsyncSandbox(c) for c in children]

    async def snapshot(self, *, metadata: Mapping[str, str] | None = None) -> SnapshotInfo:
        return await asyncio.to_thread(self.sync.snapshot, metadata=metadata)

    async def get_url(self, port: int, *, expires_in_seconds: int | None = None) -> str:
        return await asyncio.to_thread(self.sync.get_url, port, expires_in_seconds=expires_in_seconds)

    async def forward_port(self, port: int, *, host_port: int | None = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.forward_port, port, host_port=host_port)

    async def forwards(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.forwards)

    async def close_forward(self, port: int) -> None:
        await asyncio.to_thread(self.sync.close_forward, port)

    async def databases(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.databases)

    async def attach_database(self, name: str) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.attach_database, name)

    async def create_token(self, scopes: List[str], ttl_seconds: Optional[int] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.create_token, scopes, ttl_seconds)

    async def tokens(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.tokens)

    async def revoke_token(self, token_id: str) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.revoke_token, token_id)

    async def get_network(self) -> NetworkPolicy:
        return await asyncio.to_thread(self.sync.get_network)

    async def set_network(self, allow: Sequence[str] | NetworkPolicy, credentials: Credentials | None = None) -> NetworkPolicy:
        return await asyncio.to_thread(self.sync.set_network, allow, credentials)

    async def egress_log(self, *, after: int | None = None, limit: int | None = None) -> List[EgressEntry]:
        return await asyncio.to_thread(self.sync.egress_log, after=after, limit=limit)

    async def call_tool(
        self,
        name: str,
        input: Mapping[str, Any],
        *,
        cwd: str | None = None,
        max_output_chars: int | None = None,
        session: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """See Sandbox.call_tool."""
        return await asyncio.to_thread(
            self.sync.call_tool, name, input, cwd=cwd, max_output_chars=max_output_chars, session=session, user=user
        )

    async def kill(self) -> None:
        await asyncio.to_thread(self.sync.kill)


__all__ = [
    "AsyncSandbox",
    "AsyncFiles",
    "AsyncFileReader",
    "AsyncProcesses",
    "AsyncProcessHandle",
    "AsyncProcessStream",
    "AsyncOutputCallback",
]
