"""Unit tests of the agent tools against a fake daemon: the requests call_tool and Toolset
send, which failures become {"is_error": True} results and which raise, the schema cache,
and best_of's forks, outcomes and kills."""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import Any

from _support import FakeDaemon, Reply

from warren import (
    AsyncSandbox,
    AsyncToolset,
    Attempt,
    HttpClient,
    InternalError,
    InvalidArgumentError,
    NetworkError,
    NotFoundError,
    Sandbox,
    SandboxInfo,
    Toolset,
    async_best_of,
    best_of,
    tool_schemas,
)

SANDBOX = {
    "id": "sb-1",
    "template": "base",
    "templateVersion": "v1",
    "boot": "cold",
    "state": "running",
    "createdAt": "2024-01-01T00:00:00Z",
    "expiresAt": "2024-01-01T01:00:00Z",
    "metadata": {},
    "resources": {"cpus": 2, "memoryMB": 2048, "pids": 1024, "diskMB": 10240},
}
BASH_OK = {"stdout": "hi\n", "stderr": "", "exit_code": 0, "timed_out": False, "truncated": False}
ANTHROPIC = [{"name": "bash", "description": "Run a bash command.", "input_schema": {"type": "object", "properties": {}}}]


def _error(status: int, code: str, message: str) -> Reply:
    return Reply(status, json={"error": {"code": code, "message": message}})


class ToolsCase(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeDaemon()
        self.addCleanup(self.fake.close)
        self.http = HttpClient(self.fake.url, "k")
        self.sbx = Sandbox(self.http, SandboxInfo.from_wire(SANDBOX))

    def tool_route(self, name: str, reply: Reply) -> None:
        self.fake.route("POST", f"/v1/sandboxes/sb-1/tools/{name}", reply)


class CallTool(ToolsCase):
    def test_call_tool_sends_the_input_and_only_the_options_given(self) -> None:
        self.tool_route("bash", Reply(json=BASH_OK))
        self.assertEqual(self.sbx.call_tool("bash", {"command": "echo hi"}), BASH_OK)
        req = self.fake.requests[-1]
        self.assertEqual((req.method, req.path), ("POST", "/v1/sandboxes/sb-1/tools/bash"))
        self.assertEqual(req.headers["authorization"], "Bearer k")
        self.assertEqual(req.json(), {"input": {"command": "echo hi"}})
        self.sbx.call_tool("bash", {"command": "ls"}, cwd="/tmp", max_output_chars=500, session="s-1", user="root")
        self.assertEqual(
            self.fake.requests[-1].json(),
            {"input": {"command": "ls"}, "cwd": "/tmp", "maxOutputChars": 500, "session": "s-1", "user": "root"},
        )

    def test_the_tool_name_is_escaped_in_the_path(self) -> None:
        with self.assertRaises(NotFoundError):
            self.sbx.call_tool("../x y", {})
        self.assertEqual(self.fake.requests[-1].path, "/v1/sandboxes/sb-1/tools/..%2Fx%20y")

    def test_call_tool_raises_what_the_daemon_refuses(self) -> None:
        self.tool_route("str_replace_based_edit_tool", _error(400, "invalid_argument", "insert_line is required for insert"))
        with self.assertRaises(InvalidArgumentError):
            self.sbx.call_tool("str_replace_based_edit_tool", {"command": "insert", "path": "/x"})


class ToolsetCalls(ToolsCase):
    def test_defaults_are_sent_with_every_call(self) -> None:
        self.tool_route("bash", Reply(json=BASH_OK))
        tools = Toolset(self.sbx)
        self.assertEqual((tools.cwd, tools.max_output_chars, tools.session, tools.user), ("/work", 20_000, None, None))
        self.assertEqual(tools.call("bash", {"command": "echo hi"}), BASH_OK)
        self.assertEqual(self.fake.requests[-1].json(), {"input": {"command": "echo hi"}, "cwd": "/work", "maxOutputChars": 20_000})
        Toolset(self.sbx, cwd="/tmp", max_output_chars=100, session="main", user="root").call("bash", {"restart": True})
        self.assertEqual(
            self.fake.requests[-1].json(),
            {"input": {"restart": True}, "cwd": "/tmp", "maxOutputChars": 100, "session": "main", "user": "root"},
        )

    def test_a_failed_action_is_passed_through_as_is(self) -> None:
        failure = {"is_error": True, "error": "old_str does not occur in /work/a.txt"}
        self.tool_route("str_replace_based_edit_tool", Reply(json=failure))
        self.assertEqual(Toolset(self.sbx).call("str_replace_based_edit_tool", {"command": "str_replace", "path": "a.txt", "old_str": "x"}), failure)

    def test_a_malformed_input_and_an_unknown_tool_are_tool_errors(self) -> None:
        tools = Toolset(self.sbx)
        self.tool_route("str_replace_based_edit_tool", _error(400, "invalid_argument", "insert_line is required for insert"))
        self.assertEqual(
            tools.call("str_replace_based_edit_tool", {"command": "insert", "path": "/x"}),
            {"is_error": True, "error": "insert_line is required for insert"},
        )
        self.tool_route("python", _error(404, "not_found", 'no tool named "python"; the tools are bash, str_replace_based_edit_tool'))
        self.assertEqual(
            tools.call("python", {"code": "1"}),
            {"is_error": True, "error": 'no tool named "python"; the tools are bash, str_replace_based_edit_tool'},
        )

    def test_sandbox_and_daemon_failures_raise(self) -> None:
        tools = Toolset(self.sbx)
        self.tool_route("bash", _error(404, "not_found", "no sandbox sb-1"))
        with self.assertRaises(NotFoundError):
            tools.call("bash", {"command": "true"})
        self.tool_route("bash", _error(500, "internal", "the agent died"))
        with self.assertRaises(InternalError):
            tools.call("bash", {"command": "true"})
        with self.assertRaises(NetworkError):
            Toolset(Sandbox(HttpClient("http://127.0.0.1:1", "k"), SandboxInfo.from_wire(SANDBOX))).call("bash", {"command": "true"})

    def test_the_async_toolset_does_the_same(self) -> None:
        self.tool_route("bash", Reply(json=BASH_OK))
        self.tool_route("nope", _error(404, "not_found", 'no tool named "nope"; the tools are bash, str_replace_based_edit_tool'))
        self.fake.route("GET", "/v1/tools", Reply(json={"tools": ANTHROPIC}))

        async def main() -> tuple[Any, Any, Any]:
            tools = AsyncToolset(AsyncSandbox(self.sbx), session="a")
            return await tools.call("bash", {"command": "echo hi"}), await tools.call("nope", {}), await tools.schemas("anthropic")

        ok, unknown, schemas = asyncio.run(main())
        self.assertEqual(ok, BASH_OK)
        self.assertEqual(unknown["is_error"], True)
        self.assertEqual(schemas, ANTHROPIC)
        self.assertEqual(self.fake.requests[0].json()["session"], "a")


class Schemas(ToolsCase):
    def test_schemas_are_fetched_once_per_client_and_format_and_handed_out_as_copies(self) -> None:
        openai = [{"type": "function", "function": {"name": "bash", "description": "d", "parameters": {}}}]
        self.fake.route("GET", "/v1/tools", lambda r: Reply(json={"tools": openai if r.query.get("format") == "openai" else ANTHROPIC}))
        tools = Toolset(self.sbx)
        first = tools.schemas("anthropic")
        self.assertEqual(first, ANTHROPIC)
        first[0]["cache_control"] = {"type": "ephemeral"}
        self.assertEqual(tools.schemas(), ANTHROPIC)
        self.assertEqual(Toolset(self.sbx, cwd="/tmp").schemas("anthropic"), ANTHROPIC)
        self.assertEqual(tools.schemas("openai"), openai)
        self.assertEqual(tools.schemas("openai"), openai)
        self.assertEqual([r.query for r in self.fake.requests], [{"format": "anthropic"}, {"format": "openai"}])
        # Another client (another daemon or key) asks again.
        self.assertEqual(tool_schemas("anthropic", url=self.fake.url, api_key="other"), ANTHROPIC)
        self.assertEqual(len(self.fake.requests), 3)

    def test_an_unknown_format_raises_the_daemons_refusal(self) -> None:
        self.fake.route("GET", "/v1/tools", _error(400, "invalid_argument", 'format must be one of anthropic, openai (got "gemini")'))
        with self.assertRaises(InvalidArgumentError):
            Toolset(self.sbx).schemas("gemini")  # type: ignore[arg-type]


class BestOf(ToolsCase):
    def setUp(self) -> None:
        super().setUp()
        self.children = ["sb-c0", "sb-c1", "sb-c2"]
        self.fake.route("POST", "/v1/sandboxes/sb-1/fork", Reply(201, json={"sandboxes": [{**SANDBOX, "id": c} for c in self.children]}))
        for sid in ["sb-1", *self.children]:
            self.fake.route("DELETE", f"/v1/sandboxes/{sid}", Reply(204))

    def killed(self) -> list[str]:
        return sorted(r.path.rsplit("/", 1)[-1] for r in self.fake.requests if r.method == "DELETE")

    def test_outcomes_in_order_a_failing_attempt_kept_and_every_sandbox_killed(self) -> None:
        prepared: list[int] = []
        threads: set[int] = set()
        started = threading.Barrier(3, timeout=10)

        def prepare() -> Sandbox:
            prepared.append(1)
            return self.sbx

        def attempt(child: Sandbox, i: int) -> str:
            threads.add(threading.get_ident())
            started.wait()  # all three run at once
            if i == 1:
                raise ValueError("attempt 1 gave up")
            return f"{child.id}:{i}"

        outcomes = best_of(3, prepare, attempt, metadata={"suite": "x"})
        self.assertEqual(prepared, [1])
        self.assertEqual(len(threads), 3)
        self.assertEqual([o.sandbox_id for o in outcomes], self.children)
        self.assertEqual([(o.ok, o.value) for o in outcomes], [(True, "sb-c0:0"), (False, None), (True, "sb-c2:2")])
        self.assertIsInstance(outcomes[1].error, ValueError)
        self.assertEqual(outcomes[0], Attempt(True, "sb-c0:0", None, "sb-c0"))
        fork = next(r for r in self.fake.requests if r.path.endswith("/fork"))
        self.assertEqual(fork.json(), {"count": 3, "metadata": {"suite": "x"}})
        self.assertEqual(self.killed(), ["sb-1", "sb-c0", "sb-c1", "sb-c2"])

    def test_keep_prepared_leaves_the_prepared_sandbox_running(self) -> None:
        best_of(3, lambda: self.sbx, lambda child, i: i, keep_prepared=True)
        self.assertEqual(self.killed(), self.children)

    def test_a_sandbox_already_gone_is_fine_other_kill_failures_raise_after_all_kills(self) -> None:
        self.fake.route("DELETE", "/v1/sandboxes/sb-c0", _error(404, "not_found", "no sandbox sb-c0"))
        self.assertEqual([o.value for o in best_of(3, lambda: self.sbx, lambda child, i: i)], [0, 1, 2])
        self.fake.requests.clear()
        self.fake.route("DELETE", "/v1/sandboxes/sb-c1", _error(500, "internal", "runsc kill failed"))
        with self.assertRaises(ExceptionGroup) as caught:
            best_of(3, lambda: self.sbx, lambda child, i: i)
        self.assertEqual([type(e) for e in caught.exception.exceptions], [InternalError])
        self.assertIn("could not kill 1 of 3 sandboxes", str(caught.exception))
        self.assertEqual(self.killed(), ["sb-1", "sb-c0", "sb-c1", "sb-c2"])

    def test_a_failed_fork_still_kills_the_prepared_sandbox(self) -> None:
        self.fake.route("POST", "/v1/sandboxes/sb-1/fork", _error(429, "resource_exhausted", "too many sandboxes"))
        with self.assertRaises(Exception):
            best_of(3, lambda: self.sbx, lambda child, i: i)
        self.assertEqual(self.killed(), ["sb-1"])

    def test_async_best_of(self) -> None:
        async def prepare() -> AsyncSandbox:
            return AsyncSandbox(self.sbx)

        async def attempt(child: AsyncSandbox, i: int) -> str:
            await asyncio.sleep(0)
            if i == 2:
                raise RuntimeError("no")
            return child.id

        outcomes = asyncio.run(async_best_of(3, prepare, attempt))
        self.assertEqual([(o.ok, o.value, o.sandbox_id) for o in outcomes], [(True, "sb-c0", "sb-c0"), (True, "sb-c1", "sb-c1"), (False, None, "sb-c2")])
        self.assertIsInstance(outcomes[2].error, RuntimeError)
        self.assertEqual(self.killed(), ["sb-1", "sb-c0", "sb-c1", "sb-c2"])


if __name__ == "__main__":
    unittest.main()
