"""Agent tools over a sandbox: the definitions to hand a model and the calls that run them,
and best-of-N over forks. Mirrors the TS SDK's tools.ts. The daemon implements the tools
(`POST /v1/sandboxes/:id/tools/:name`) and serves their definitions (`GET /v1/tools`), so
this SDK, the TS SDK and the MCP server behave the same.

    from warren import Sandbox
    from warren.tools import Toolset

    with Sandbox.create() as sbx:
        tools = Toolset(sbx, cwd="/work")
        definitions = tools.schemas("anthropic")
        # ... the model answers with a tool call {name, input}:
        result = tools.call(name, input)  # a JSON-able dict for the tool result
"""

from __future__ import annotations

import asyncio
import copy
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, List, Literal, Mapping, Sequence, TypeVar, Union

from .aio import AsyncSandbox
from .client import HttpClient, get_client
from .errors import InvalidArgumentError, NotFoundError, WarrenError
from .sandbox import Sandbox

T = TypeVar("T")
ToolFormat = Literal["anthropic", "openai"]
# What a tool call returns: bash {stdout, stderr, exit_code, timed_out, truncated}, the editor
# {output}, or a failure {is_error: True, error}. Plain dicts: they go back to the model as JSON.
ToolResult = dict[str, Any]

DEFAULT_CWD = "/work"
DEFAULT_MAX_OUTPUT_CHARS = 20_000

# The definitions as the daemon serves them, per client (daemon and key) and format: fetched
# once, then handed out as copies (a caller may add cache_control or rename without touching
# the next caller's).
_schema_cache: weakref.WeakKeyDictionary[HttpClient, dict[str, List[dict[str, Any]]]] = weakref.WeakKeyDictionary()
_schema_lock = threading.Lock()


def _schemas(http: HttpClient, format: str) -> List[dict[str, Any]]:
    with _schema_lock:
        cached = _schema_cache.get(http, {}).get(format)
    if cached is None:
        # Fetched outside the lock: two threads may both fetch the first time, and get the same.
        fetched = http.json("GET", "/v1/tools", query={"format": format})["tools"]
        with _schema_lock:
            cached = _schema_cache.setdefault(http, {}).setdefault(format, fetched)
    return copy.deepcopy(cached)


def tool_schemas(format: ToolFormat = "anthropic", *, url: str | None = None, api_key: str | None = None) -> List[dict[str, Any]]:
    """The tool definitions the daemon serves, with no sandbox: Anthropic's
    `[{name, description, input_schema}]` or OpenAI's `[{type: "function", function: {name,
    description, parameters}}]`. Fetched once per daemon and key, then cached."""
    return _schemas(get_client(url, api_key), format)


def _is_tool_error(err: WarrenError) -> bool:
    """The model's own mistakes, which it can fix: a malformed input (400) or a tool name
    that does not exist (404 naming the tools). Any other failure is the caller's."""
    return isinstance(err, InvalidArgumentError) or (isinstance(err, NotFoundError) and "no tool named" in err.message)


class Toolset:
    """The agent tool set over one sandbox: `schemas()` for the model, `call()` for its tool
    calls. `cwd`: where commands start and relative paths resolve (must exist).
    `max_output_chars`: characters kept of each output stream (its end) and of a viewed file
    (100 to 1000000). `session`: run bash in this named session (`cd` and exported variables
    carry over between calls). `user`: the sandbox user tools run as (default the template's).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        cwd: str = DEFAULT_CWD,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        session: str | None = None,
        user: str | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.cwd = cwd
        self.max_output_chars = max_output_chars
        self.session = session
        self.user = user

    def __repr__(self) -> str:
        return f"Toolset(sandbox={self.sandbox.id!r}, cwd={self.cwd!r}, session={self.session!r}, user={self.user!r})"

    def schemas(self, format: ToolFormat = "anthropic") -> List[dict[str, Any]]:
        """Tool definitions for a model: Anthropic's `{name, description, input_schema}` or
        OpenAI's `{type: "function", function: {name, description, parameters}}`, as the
        daemon serves them (fetched once per client, then cached)."""
        return _schemas(self.sandbox._http, format)

    def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        """Runs the tool call a model asked for and returns what to give back to it: a
        failed action, a bad argument or an unknown tool name is `{"is_error": True,
        "error": message}`, never an exception (the loop above goes on and the model fixes
        its call). Sandbox and network failures raise."""
        try:
            return self.sandbox.call_tool(name, args, cwd=self.cwd, max_output_chars=self.max_output_chars, session=self.session, user=self.user)
        except WarrenError as err:
            if _is_tool_error(err):
                return {"is_error": True, "error": err.message}
            raise


class AsyncToolset:
    """Toolset for an AsyncSandbox: `await tools.schemas()`, `await tools.call(name, args)`."""

    def __init__(
        self,
        sandbox: AsyncSandbox,
        cwd: str = DEFAULT_CWD,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        session: str | None = None,
        user: str | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.sync = Toolset(sandbox.sync, cwd=cwd, max_output_chars=max_output_chars, session=session, user=user)

    def __repr__(self) -> str:
        return "Async" + repr(self.sync)

    @property
    def cwd(self) -> str:
        return self.sync.cwd

    @property
    def max_output_chars(self) -> int:
        return self.sync.max_output_chars

    @property
    def session(self) -> str | None:
        return self.sync.session

    @property
    def user(self) -> str | None:
        return self.sync.user

    async def schemas(self, format: ToolFormat = "anthropic") -> List[dict[str, Any]]:
        """See Toolset.schemas."""
        return await asyncio.to_thread(self.sync.schemas, format)

    async def call(self, name: str, args: Mapping[str, Any]) -> ToolResult:
        """See Toolset.call."""
        return await asyncio.to_thread(self.sync.call, name, args)


@dataclass(frozen=True)
class Attempt(Generic[T]):
    """One attempt of `best_of`, in fork order: `ok` and its `value`, or the `error` it
    raised; `sandbox_id` is the fork it ran on (killed by the time you read this)."""

    ok: bool
    value: T | None
    error: BaseException | None
    sandbox_id: str


def best_of(
    n: int,
    prepare: Callable[[], Sandbox],
    attempt: Callable[[Sandbox, int], T],
    metadata: Mapping[str, str] | None = None,
    keep_prepared: bool = False,
) -> List[Attempt[T]]:
    """Best of N: `prepare()` makes a sandbox once (clone, install, warm up), it is forked
    into `n` live copies from that instant (`fork_tree`), `attempt(child, index)` runs on
    each concurrently (one thread each), and every copy, and the prepared sandbox unless
    `keep_prepared`, is killed whatever happens. Outcomes come back in fork order; an attempt
    that raises is an outcome with its error, not the end of the others. Kills that fail
    (other than for a sandbox already gone) raise an ExceptionGroup once all were tried.

        outcomes = best_of(3, lambda: Sandbox.create(), lambda sbx, i: sbx.exec(f"./try.sh {i}").exit_code)
    """
    base = prepare()
    try:
        children = base.fork_tree(n, metadata=metadata)
        try:
            pool = ThreadPoolExecutor(max_workers=len(children) or 1, thread_name_prefix="warren-best-of")
            try:
                futures = [pool.submit(_run_attempt, attempt, child, i) for i, child in enumerate(children)]
                return [f.result() for f in futures]
            finally:
                # Interrupted while attempts still run: their sandboxes are killed right
                # after, which ends them; do not wait for them here.
                pool.shutdown(wait=False, cancel_futures=True)
        finally:
            _kill_all(children)
    finally:
        if not keep_prepared:
            _kill_all([base])


def _run_attempt(attempt: Callable[[Sandbox, int], T], child: Sandbox, index: int) -> Attempt[T]:
    try:
        return Attempt(True, attempt(child, index), None, child.id)
    except Exception as err:
        return Attempt(False, None, err, child.id)


def _kill_all(sandboxes: Sequence[Sandbox]) -> None:
    """Kills every sandbox even if some kills fail; one already gone is fine, other
    failures are raised together."""

    def kill(sbx: Sandbox) -> Exception | None:
        try:
            sbx.kill()
        except NotFoundError:
            pass
        except Exception as err:
            return err
        return None

    if len(sandboxes) == 1:
        results = [kill(sandboxes[0])]
    else:
        with ThreadPoolExecutor(max_workers=len(sandboxes) or 1, thread_name_prefix="warren-kill") as pool:
            results = list(pool.map(kill, sandboxes))
    _raise_kill_failures(results, len(sandboxes))


def _raise_kill_failures(results: Sequence[Union[BaseException, None]], total: int) -> None:
    failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, NotFoundError)]
    if failures:
        raise ExceptionGroup(f"could not kill {len(failures)} of {total} sandboxes", failures)


async def async_best_of(
    n: int,
    prepare: Callable[[], Awaitable[AsyncSandbox]],
    attempt: Callable[[AsyncSandbox, int], Awaitable[T]],
    metadata: Mapping[str, str] | None = None,
    keep_prepared: bool = False,
) -> List[Attempt[T]]:
    """best_of for asyncio: `prepare` and `attempt` are coroutine functions and the attempts
    run concurrently on the event loop (asyncio.gather). The same kills and outcomes."""
    base = await prepare()
    try:
        children = await base.fork_tree(n, metadata=metadata)
        try:

            async def run(child: AsyncSandbox, index: int) -> Attempt[T]:
                try:
                    return Attempt(True, await attempt(child, index), None, child.id)
                except Exception as err:
                    return Attempt(False, None, err, child.id)

            return list(await asyncio.gather(*(run(c, i) for i, c in enumerate(children))))
        finally:
            await _async_kill_all(children)
    finally:
        if not keep_prepared:
            await _async_kill_all([base])


async def _async_kill_all(sandboxes: Sequence[AsyncSandbox]) -> None:
    results = await asyncio.gather(*(s.kill() for s in sandboxes), return_exceptions=True)
    _raise_kill_failures(results, len(sandboxes))


__all__ = [
    "Toolset",
    "AsyncToolset",
    "Attempt",
    "best_of",
    "async_best_of",
    "tool_schemas",
    "ToolFormat",
    "ToolResult",
]
