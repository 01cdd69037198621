"""End to end: the agent tool set through Toolset (bash: output, the cut tail, sessions; the
editor: create, view, refusals, undo), definitions equal to the daemon's, a model's mistakes
as tool errors, and best_of's forks and kills."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from typing import Any

from _support import E2ECase, kill_quietly

from warren import AsyncSandbox, AsyncToolset, NotFoundError, Sandbox, Toolset, async_best_of, best_of


class Tools(E2ECase):
    sbx: Sandbox
    tools: Toolset

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(ttl_seconds=900, metadata={"suite": "python", "test": "tools"})
        cls.addClassCleanup(kill_quietly, cls.sbx)
        cls.sbx.exec("mkdir -p /work && chown user:user /work", user="root", check=True)
        cls.tools = Toolset(cls.sbx)

    def bash(self, result: dict[str, Any]) -> dict[str, Any]:
        self.assertIn("exit_code", result, f"not a bash result: {result}")
        return result

    def edited(self, result: dict[str, Any]) -> str:
        self.assertIn("output", result, f"the edit failed: {result}")
        return str(result["output"])

    def failed(self, result: dict[str, Any]) -> str:
        self.assertIs(result.get("is_error"), True, f"expected a tool error, got {result}")
        return str(result["error"])

    def test_schemas_are_the_daemons(self) -> None:
        for fmt in ("anthropic", "openai"):
            req = urllib.request.Request(f"{os.environ['WARREN_URL']}/v1/tools?format={fmt}", headers={"Authorization": f"Bearer {os.environ['WARREN_API_KEY']}"})
            with urllib.request.urlopen(req) as res:
                served = json.load(res)["tools"]
            self.assertEqual(self.tools.schemas(fmt), served)  # type: ignore[arg-type]
        anthropic = self.tools.schemas("anthropic")
        self.assertEqual([t["name"] for t in anthropic], ["bash", "str_replace_based_edit_tool"])
        self.assertEqual(anthropic[1]["input_schema"]["required"], ["command", "path"])
        openai = self.tools.schemas("openai")
        self.assertEqual(openai[0]["type"], "function")
        self.assertEqual(openai[0]["function"]["parameters"], anthropic[0]["input_schema"])

    def test_bash_stdout_stderr_and_exit_code_in_the_toolset_cwd(self) -> None:
        r = self.bash(self.tools.call("bash", {"command": "pwd; id -un; echo oops >&2; exit 3"}))
        self.assertEqual(r, {"stdout": "/work\nuser\n", "stderr": "oops\n", "exit_code": 3, "timed_out": False, "truncated": False})

    def test_bash_big_output_keeps_its_tail_after_a_marker(self) -> None:
        tools = Toolset(self.sbx, max_output_chars=1000)
        r = self.bash(tools.call("bash", {"command": 'head -c 5000000 /dev/zero | tr "\\0" x; echo; echo THE-END; echo err >&2'}))
        self.assertIs(r["truncated"], True)
        marker, kept = r["stdout"].split("\n", 1)
        self.assertEqual(marker, "[warren: 4999009 earlier characters of stdout cut; the last 1000 follow]")
        self.assertEqual(len(kept), 1000)
        self.assertTrue(kept.endswith("x\nTHE-END\n"))
        self.assertEqual(r["stderr"], "err\n")

    def test_bash_session_carries_cd_and_exports_until_restart(self) -> None:
        s = Toolset(self.sbx, session="py-main")
        self.bash(s.call("bash", {"command": 'mkdir -p /tmp/proj && cd /tmp/proj && export GREETING="hello there" && LOCAL=1'}))
        self.assertEqual(self.bash(s.call("bash", {"command": 'pwd; echo "$GREETING|${LOCAL:-unset}"'}))["stdout"], "/tmp/proj\nhello there|unset\n")
        self.assertEqual(self.bash(s.call("bash", {"command": "cd /; export N=2; false"}))["exit_code"], 1)
        self.assertEqual(self.bash(s.call("bash", {"command": "pwd; echo $N"}))["stdout"], "/\n2\n")
        # No session: nothing carries.
        self.assertEqual(self.bash(self.tools.call("bash", {"command": 'pwd; echo "${N:-none}"'}))["stdout"], "/work\nnone\n")
        self.assertEqual(self.bash(s.call("bash", {"restart": True}))["stdout"], "shell session restarted\n")
        self.assertEqual(self.bash(s.call("bash", {"command": 'pwd; echo "${N:-none}"'}))["stdout"], "/work\nnone\n")

    def test_editor_create_view_refuse_replace_and_undo(self) -> None:
        path = "/work/py-edit/main.py"

        def edit(**input: Any) -> dict[str, Any]:
            return self.tools.call("str_replace_based_edit_tool", {"path": path, **input})

        self.assertIn("created", self.edited(edit(command="create", file_text="x = 1\nsame\ny = 2\nsame\n")))
        self.assertEqual(self.edited(edit(command="view")), "     1\tx = 1\n     2\tsame\n     3\ty = 2\n     4\tsame\n     5\t\n")
        self.assertEqual(self.edited(edit(command="view", view_range=[3, 3])), "     3\ty = 2\n")
        self.assertRegex(self.failed(edit(command="str_replace", old_str="same", new_str="other")), r"occurs 2 times .* at lines 2, 4")
        self.assertIn("already exists", self.failed(edit(command="create", file_text="x")))
        self.assertRegex(self.edited(edit(command="str_replace", old_str="y = 2", new_str="y = 3")), r"3\ty = 3")
        self.assertEqual(self.sbx.files.read_text(path), "x = 1\nsame\ny = 3\nsame\n")
        self.assertEqual(self.sbx.exec(["stat", "-c", "%U", path]).stdout, "user\n")
        self.edited(edit(command="undo_edit"))
        self.assertEqual(self.sbx.files.read_text(path), "x = 1\nsame\ny = 2\nsame\n")
        self.assertIn("no edit of /work/py-edit/main.py to undo", self.failed(edit(command="undo_edit")))
        # Relative paths resolve against the cwd.
        self.assertIn("/work/py-edit/main.py", self.edited(self.tools.call("str_replace_based_edit_tool", {"command": "view", "path": "py-edit"})))

    def test_a_models_mistakes_are_tool_errors_a_missing_sandbox_raises(self) -> None:
        self.assertIn(
            'no tool named "python"; the tools are bash, str_replace_based_edit_tool',
            self.failed(self.tools.call("python", {"code": "1"})),
        )
        self.assertIn("insert_line is required for insert", self.failed(self.tools.call("str_replace_based_edit_tool", {"command": "insert", "path": "/work/x"})))
        self.assertIn("/work/nope.txt does not exist", self.failed(self.tools.call("str_replace_based_edit_tool", {"command": "view", "path": "/work/nope.txt"})))
        gone = Sandbox.create(ttl_seconds=600, metadata={"suite": "python", "test": "tools-gone"})
        gone.kill()
        with self.assertRaises(NotFoundError):
            Toolset(gone).call("bash", {"command": "true"})

    def test_the_async_toolset(self) -> None:
        async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            tools = AsyncToolset(AsyncSandbox(self.sbx), cwd="/tmp")
            return await tools.call("bash", {"command": "pwd"}), await tools.schemas("openai")

        r, schemas = asyncio.run(main())
        self.assertEqual((r["stdout"], r["exit_code"]), ("/tmp\n", 0))
        self.assertEqual(schemas, self.tools.schemas("openai"))


class BestOf(E2ECase):
    def test_best_of_with_a_failing_attempt_kills_every_sandbox(self) -> None:
        prepared: list[Sandbox] = []

        def prepare() -> Sandbox:
            sbx = self.create(metadata={"role": "prepared"})
            prepared.append(sbx)
            sbx.exec("echo warm > /tmp/state", check=True)
            return sbx

        def attempt(child: Sandbox, i: int) -> str:
            if i == 1:
                raise RuntimeError("attempt 1 gave up")
            return Toolset(child, cwd="/tmp").call("bash", {"command": f"cat /tmp/state; echo {i}"})["stdout"]  # type: ignore[no-any-return]

        outcomes = best_of(3, prepare, attempt, metadata={"suite": "python-best-of"})
        self.assertEqual([o.value if o.ok else str(o.error) for o in outcomes], ["warm\n0\n", "attempt 1 gave up", "warm\n2\n"])
        self.assertEqual(len({o.sandbox_id for o in outcomes}), 3)
        self.assertEqual(Sandbox.list(metadata={"suite": "python-best-of"}), [])
        with self.assertRaises(NotFoundError):
            Sandbox.connect(prepared[0].id)

    def test_async_best_of_keep_prepared(self) -> None:
        base = self.create()

        async def main() -> list[Any]:
            async def prepare() -> AsyncSandbox:
                return AsyncSandbox(base)

            async def attempt(child: AsyncSandbox, i: int) -> str:
                return (await child.exec(["echo", str(i)])).stdout

            return await async_best_of(2, prepare, attempt, metadata={"suite": "python-async-best-of"}, keep_prepared=True)

        outcomes = asyncio.run(main())
        self.assertEqual([o.value for o in outcomes], ["0\n", "1\n"])
        self.assertEqual(Sandbox.list(metadata={"suite": "python-async-best-of"}), [])
        self.assertEqual(base.refresh().state, "running")
