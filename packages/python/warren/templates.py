"""Templates: a builder for recipes, and list/get/delete of installed templates. Mirrors the TS
SDK's template.ts in snake_case."""

from __future__ import annotations

import os
from typing import Any, Callable, List, Mapping, Optional, Sequence
from urllib.parse import quote

from .client import get_client
from .errors import TemplateBuildError, UnavailableError
from .models import BuildEvent, PruneResult, TemplateInfo

EventCallback = Optional[Callable[[BuildEvent], object]]


class Template:
    """A template recipe, built up step by step. Each call returns a new Template, so a chain
    can be branched. env, workdir and user apply to later steps and become the template's
    runtime defaults.

        info = (Template.from_("base")
                .apt_install(["jq"])
                .copy("server.py", "/app/server.py", owner="user")
                .env({"PORT": "3000"}).workdir("/app").user("user")
                .start("python3 server.py").ready_port(3000)
                .build("my-app", on_event=print))
    """

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        self._recipe = dict(recipe)

    def __repr__(self) -> str:
        return f"Template({self._recipe!r})"

    @staticmethod
    def from_(base: str, include: Sequence[str] | None = None) -> Template:
        """'debian:bookworm' (debootstrap minbase; `include` adds packages) or an installed
        template's name. (`from` is a Python keyword, hence the underscore.)"""
        recipe: dict[str, Any] = {"from": base, "steps": []}
        if include is not None:
            recipe["include"] = list(include)
        return Template(recipe)

    def apt_install(self, packages: Sequence[str]) -> Template:
        """`apt-get install -y --no-install-recommends` as root (lists cleaned in the step)."""
        return self._step({"type": "apt", "packages": list(packages)})

    def run(self, cmd: str, *, user: str | None = None, cwd: str | None = None) -> Template:
        """A shell command (/bin/sh -c); default user: the current `user` step's, else root."""
        return self._step({"type": "run", "cmd": cmd, **_compact({"user": user, "cwd": cwd})})

    def copy(self, src: str, dest: str, *, owner: str | None = None) -> Template:
        """Copies a file or directory from the build context to an absolute path."""
        return self._step({"type": "copy", "src": src, "dest": dest, **_compact({"owner": owner})})

    def env(self, variables: Mapping[str, str]) -> Template:
        return self._step({"type": "env", "env": dict(variables)})

    def workdir(self, path: str) -> Template:
        return self._step({"type": "workdir", "path": path})

    def user(self, name: str) -> Template:
        return self._step({"type": "user", "user": name})

    def start(self, cmd: str, *, user: str | None = None, cwd: str | None = None) -> Template:
        """The command baking starts (and keeps running) in the template's sandboxes."""
        return Template({**self._recipe, "start": {"cmd": cmd, **_compact({"user": user, "cwd": cwd})}})

    def ready_port(self, port: int, *, timeout_seconds: int | None = None) -> Template:
        """Ready once something listens on this port inside the sandbox."""
        return Template({**self._recipe, "ready": {"port": port, **_compact({"timeoutSeconds": timeout_seconds})}})

    def ready_command(self, cmd: str, *, timeout_seconds: int | None = None) -> Template:
        """Ready once this shell command exits 0 inside the sandbox."""
        return Template({**self._recipe, "ready": {"cmd": cmd, **_compact({"timeoutSeconds": timeout_seconds})}})

    def bake(self, enabled: bool) -> Template:
        """Whether the template is baked (default True). False: every create boots it cold,
        e.g. when its start-up makes a secret each sandbox must have its own of. Same as
        Template.bake() in the TypeScript SDK."""
        return Template({**self._recipe, "bake": enabled})

    def to_recipe(self, name: str) -> dict[str, Any]:
        """The recipe as JSON (what `warren template build` reads from a file)."""
        return {"name": name, **self._recipe, "steps": list(self._recipe.get("steps", []))}

    def build(
        self,
        name: str,
        *,
        context_dir: str | None = None,
        on_event: EventCallback = None,
        url: str | None = None,
        api_key: str | None = None,
    ) -> TemplateInfo:
        """Builds (or finds cached) and installs the template; returns it. on_event gets
        every event of the build as it happens (step starts, log lines, step ends).
        context_dir is the host directory copy sources are relative to (default: the
        current directory). Raises TemplateBuildError with the failing step's exit code and
        output tail."""
        return Template.build_recipe(self.to_recipe(name), context_dir=context_dir, on_event=on_event, url=url, api_key=api_key)

    @staticmethod
    def build_recipe(
        recipe: Mapping[str, Any],
        *,
        context_dir: str | None = None,
        on_event: EventCallback = None,
        url: str | None = None,
        api_key: str | None = None,
    ) -> TemplateInfo:
        """Builds a recipe given as JSON (e.g. read from a recipe.json)."""
        http = get_client(url, api_key)
        body = {**recipe, "contextDir": os.path.abspath(context_dir or os.getcwd())}
        # Unlike most POSTs a build may be sent again after a stale keep-alive connection:
        # layers are cached and every commit is atomic, so a duplicate finds the first's work.
        response = http.request("POST", "/v1/templates/build", json=body, replayable=True)
        with response:
            for wire in response.iter_ndjson():
                event = BuildEvent.from_wire(wire)
                if on_event is not None:
                    on_event(event)
                if event.type == "done" and event.template is not None:
                    response.drain()
                    return event.template
                if event.type == "error":
                    raise TemplateBuildError(event.code or "internal", event.message or "the build failed", event.step, event.exit_code, event.output)
        raise UnavailableError("unavailable", "the build stream ended without a result (did the daemon stop?)")

    @staticmethod
    def list(*, url: str | None = None, api_key: str | None = None) -> List[TemplateInfo]:
        return [TemplateInfo.from_wire(t) for t in get_client(url, api_key).json("GET", "/v1/templates")["templates"]]

    @staticmethod
    def get(name: str, *, url: str | None = None, api_key: str | None = None) -> TemplateInfo:
        return TemplateInfo.from_wire(get_client(url, api_key).json("GET", f"/v1/templates/{quote(name, safe='')}"))

    @staticmethod
    def delete(name: str, *, url: str | None = None, api_key: str | None = None) -> None:
        """Removes every version of a template; ConflictError while a sandbox uses it."""
        get_client(url, api_key).json("DELETE", f"/v1/templates/{quote(name, safe='')}")

    @staticmethod
    def prune_layers(all: bool = False, *, url: str | None = None, api_key: str | None = None) -> PruneResult:
        """Drops cached build layers: those no template version on disk was built from, or
        with all=True every one. ConflictError while a build runs."""
        body = {"all": True} if all else {}
        return PruneResult.from_wire(get_client(url, api_key).json("POST", "/v1/templates/prune", json=body))

    def _step(self, step: dict[str, Any]) -> Template:
        return Template({**self._recipe, "steps": [*self._recipe.get("steps", []), step]})


def _compact(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}

