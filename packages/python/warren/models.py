"""What the API answers, as dataclasses with snake_case fields. The daemon speaks camelCase
(packages/protocol/src/api.ts); `from_wire` converts the top-level keys only, so the keys of
metadata, env and headers stay exactly as given. Fields a newer daemon adds are kept in `raw`."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Mapping, TypeVar

T = TypeVar("T", bound="Model")

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z]+)")


def snake_case(name: str) -> str:
    """templateVersion -> template_version, memoryMB -> memory_mb, from -> from_."""
    snake = _CAMEL.sub(lambda m: "_" + m.group(1).lower(), name)
    return snake + "_" if keyword.iskeyword(snake) else snake


@dataclass
class Model:
    """Base of the answer types: `raw` is the object as the daemon sent it."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    # field name -> how to build its value from the wire value (nested objects)
    _nested: ClassVar[dict[str, Any]] = {}

    @classmethod
    def from_wire(cls: type[T], data: Mapping[str, Any]) -> T:
        names = {f.name for f in fields(cls) if f.name != "raw"}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = snake_case(key)
            if name not in names:
                continue
            convert = cls._nested.get(name)
            kwargs[name] = convert(value) if convert is not None and value is not None else value
        return cls(**kwargs, raw=dict(data))


def _list_of(cls: type[T]) -> Any:
    return lambda items: [cls.from_wire(x) for x in items]


@dataclass
class Resources(Model):
    """A sandbox's limits. As input every field is optional (the daemon's defaults apply);
    as output all four are set."""

    cpus: float | None = None
    memory_mb: int | None = None
    pids: int | None = None
    disk_mb: int | None = None

    _WIRE: ClassVar[dict[str, str]] = {"cpus": "cpus", "memory_mb": "memoryMB", "pids": "pids", "disk_mb": "diskMB"}

    def to_wire(self) -> dict[str, Any]:
        return {wire: getattr(self, name) for name, wire in self._WIRE.items() if getattr(self, name) is not None}

    @classmethod
    def wire_from(cls, value: Resources | Mapping[str, Any]) -> dict[str, Any]:
        """Request form of `resources=`: a Resources, or a dict with snake_case or wire keys."""
        if isinstance(value, Resources):
            return value.to_wire()
        # Unknown keys pass through: the daemon names them in its 400.
        return {cls._WIRE.get(k, k): v for k, v in value.items() if v is not None}


SandboxState = Literal["creating", "running", "hibernating", "hibernated", "dead"]
BootKind = Literal["cold", "baked", "pool", "fork", "snapshot"]


@dataclass
class SandboxInfo(Model):
    id: str = ""
    template: str = ""
    template_version: str = ""
    boot: str = ""
    state: str = ""
    created_at: str = ""
    expires_at: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    idle_seconds: int | None = None
    source: str | None = None
    disk_bytes: int | None = None
    error: str | None = None

    _nested: ClassVar[dict[str, Any]] = {"resources": Resources.from_wire}


@dataclass
class ExecResult(Model):
    """A finished command: what it printed, how it ended and how long it took."""

    pid: int = 0
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_ms: float = 0
    signal: str | None = None


@dataclass
class ProcessInfo(Model):
    pid: int = 0
    command: list[str] = field(default_factory=list)
    running: bool = False
    exit_code: int | None = None
    timed_out: bool = False
    started_at: str = ""
    tag: str | None = None
    signal: str | None = None
    ended_at: str | None = None


@dataclass
class ProcessOutput(Model):
    """Output from the offsets asked for; pass `stdout_offset`/`stderr_offset` back for more."""

    pid: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_offset: int = 0
    stderr_offset: int = 0
    running: bool = False
    exit_code: int | None = None


@dataclass
class OutputChunk:
    """One piece of a followed process's output."""

    stream: Literal["stdout", "stderr"]
    data: str


@dataclass
class FileStat(Model):
    path: str = ""
    name: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mtime: str = ""


@dataclass
class WriteResult(Model):
    size: int = 0
    path: str = ""


@dataclass
class DirUploadResult(Model):
    """Where an upload landed and what the archive held (`bytes`: of file contents)."""

    path: str = ""
    files: int = 0
    directories: int = 0
    symlinks: int = 0
    hardlinks: int = 0
    bytes: int = 0


@dataclass
class SnapshotInfo(Model):
    id: str = ""
    sandbox_id: str = ""
    template: str = ""
    template_version: str = ""
    created_at: str = ""
    size_bytes: int = 0
    metadata: dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)

    _nested: ClassVar[dict[str, Any]] = {"resources": Resources.from_wire}


@dataclass
class CredentialRule(Model):
    """Headers the daemon adds to every request the sandbox makes to `host`; the values
    never enter the sandbox and come back as "[redacted]"."""

    host: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"host": self.host, "headers": dict(self.headers)}


@dataclass
class NetworkPolicy(Model):
    allow: list[str] = field(default_factory=list)
    credentials: list[CredentialRule] | None = None

    _nested: ClassVar[dict[str, Any]] = {"credentials": _list_of(CredentialRule)}


@dataclass
class EgressEntry(Model):
    id: int = 0
    time: str = ""
    host: str = ""
    port: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    decision: str = ""
    method: str | None = None
    path: str | None = None
    reason: str | None = None


@dataclass
class TemplateInfo(Model):
    name: str = ""
    version: str = ""
    built_at: str = ""
    env: dict[str, str] = field(default_factory=dict)
    recipe_hash: str | None = None
    from_: str | None = None
    workdir: str | None = None
    user: str | None = None
    start: dict[str, Any] | None = None
    ready: dict[str, Any] | None = None


@dataclass
class BuildEvent(Model):
    """One event of a template build stream: `type` is step, log, step_done, keepalive, done
    or error; the other fields are those the type carries."""

    type: str = ""
    step: int | None = None
    total: int | None = None
    kind: str | None = None
    description: str | None = None
    cached: bool | None = None
    stream: str | None = None
    line: str | None = None
    elapsed_ms: float | None = None
    template: TemplateInfo | None = None
    code: str | None = None
    message: str | None = None
    exit_code: int | None = None
    output: str | None = None

    _nested: ClassVar[dict[str, Any]] = {"template": TemplateInfo.from_wire}


@dataclass
class PruneResult(Model):
    removed: int = 0
    kept: int = 0
    freed_bytes: int = 0


@dataclass
class ClaimLatency(Model):
    p50: float = 0
    p95: float = 0
    p99: float = 0
    count: int = 0


@dataclass
class PoolInfo(Model):
    template: str = ""
    size: int = 0
    ready: int = 0
    booting: int = 0
    hits: int = 0
    misses: int = 0
    reclaimed: int = 0
    boot_failures: int = 0
    last_error: str | None = None
    claim_ms: ClaimLatency | None = None

    _nested: ClassVar[dict[str, Any]] = {"claim_ms": ClaimLatency.from_wire}


@dataclass
class BakeInfo(Model):
    state: str = ""
    template: str | None = None
    version: str | None = None
    baked_at: str | None = None
    ms: float | None = None
    error: str | None = None
    reason: str | None = None


@dataclass
class UsagePrices(Model):
    currency: str = "USD"
    vcpu_hour: float = 0
    gib_hour: float = 0


@dataclass
class SandboxUsage(Model):
    sandbox_id: str = ""
    api_key_id: str = ""
    template: str = ""
    active: bool = False
    active_seconds: float = 0
    vcpu_seconds: float = 0
    gib_seconds: float = 0
    cost: float = 0


@dataclass
class ApiKeyUsage(Model):
    api_key_id: str = ""
    sandboxes: int = 0
    active_seconds: float = 0
    vcpu_seconds: float = 0
    gib_seconds: float = 0
    cost: float = 0


@dataclass
class UsageTotal(Model):
    sandboxes: int = 0
    active_seconds: float = 0
    vcpu_seconds: float = 0
    gib_seconds: float = 0
    cost: float = 0


@dataclass
class UsageReport(Model):
    since: str = ""
    until: str = ""
    prices: UsagePrices = field(default_factory=UsagePrices)
    sandboxes: list[SandboxUsage] = field(default_factory=list)
    api_keys: list[ApiKeyUsage] = field(default_factory=list)
    total: UsageTotal = field(default_factory=UsageTotal)

    _nested: ClassVar[dict[str, Any]] = {
        "prices": UsagePrices.from_wire,
        "sandboxes": _list_of(SandboxUsage),
        "api_keys": _list_of(ApiKeyUsage),
        "total": UsageTotal.from_wire,
    }
