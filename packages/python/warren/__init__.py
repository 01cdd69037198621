"""warren: the Python SDK for the warren sandbox daemon (standard library only).

    from warren import Sandbox

    with Sandbox.create(template="base", ttl_seconds=3600) as sbx:
        r = sbx.exec("echo hello", timeout_seconds=60)
        print(r.stdout, r.exit_code)

Agent tools (bash and the text editor, served by the daemon) and best-of-N over forks:
`from warren import Toolset, best_of` (warren.tools).

Connection: `url=` / `api_key=` on every entry point, else $WARREN_URL (default
http://127.0.0.1:7070) and $WARREN_API_KEY (default: $WARREN_HOME/admin.key). docs/python.md
describes every class and method.
"""

from .aio import AsyncFileReader, AsyncFiles, AsyncProcesses, AsyncProcessHandle, AsyncProcessStream, AsyncSandbox, AsyncTerminal, AsyncTerminals
from .client import HttpClient, Response, get_client, resolve_api_key, resolve_url
from .errors import (
    AuthenticationError,
    CommandError,
    ConflictError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    TemplateBuildError,
    TooLargeError,
    UnavailableError,
    WarrenError,
    error_from_body,
)
from .files import BinaryWriter, FileReader, Files, WriteData
from .terminals import Terminal, TerminalInfo, TerminalOutput, Terminals
from .models import (
    ApiKeyUsage,
    BakeInfo,
    BuildEvent,
    ClaimLatency,
    CredentialRule,
    DirUploadResult,
    EgressEntry,
    ExecResult,
    FileStat,
    NetworkPolicy,
    OutputChunk,
    PoolInfo,
    ProcessInfo,
    ProcessOutput,
    PruneResult,
    Resources,
    SandboxInfo,
    SandboxUsage,
    SnapshotInfo,
    TemplateInfo,
    UsagePrices,
    UsageReport,
    UsageTotal,
    WriteResult,
)
from .processes import Processes, ProcessHandle, ProcessStream
from .sandbox import Sandbox
from .snapshots import Snapshots
from .databases import Database, DatabaseInfo
from .stdin import StdinData
from .templates import Template
from .tools import Attempt, AsyncToolset, Toolset, async_best_of, best_of, tool_schemas
from .usage import get_usage
from .dashboard import DashboardLoginLink, dashboard_login_link
from .keys import ApiKeys, get_audit_trail
from .watch import AsyncWatch, Watch, WatchEvent
from .warm import bake, get_bake, get_pool, set_pool_size

# The TS SDK's name for the 504 class. Importable as `warren.TimeoutError`, but left out of
# __all__ so `from warren import *` does not hide Python's builtin TimeoutError.
TimeoutError = DeadlineExceededError

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "AsyncSandbox",
    "AsyncTerminal",
    "AsyncTerminals",
    "Files",
    "DirUploadResult",
    "FileReader",
    "BinaryWriter",
    "WriteData",
    "Processes",
    "ProcessHandle",
    "ProcessStream",
    "StdinData",
    "AsyncFiles",
    "AsyncFileReader",
    "AsyncProcesses",
    "AsyncProcessHandle",
    "AsyncProcessStream",
    "Snapshots",
    "Database",
    "DatabaseInfo",
    "Template",
    "Toolset",
    "AsyncToolset",
    "Attempt",
    "best_of",
    "async_best_of",
    "tool_schemas",
    "get_usage",
    "dashboard_login_link",
    "DashboardLoginLink",
    "ApiKeys",
    "get_audit_trail",
    "get_pool",
    "set_pool_size",
    "get_bake",
    "bake",
    "HttpClient",
    "Response",
    "get_client",
    "resolve_api_key",
    "resolve_url",
    "WarrenError",
    "InvalidArgumentError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "FailedPreconditionError",
    "TooLargeError",
    "ResourceExhaustedError",
    "InternalError",
    "UnavailableError",
    "DeadlineExceededError",
    "NetworkError",
    "CommandError",
    "TemplateBuildError",
    "error_from_body",
    "ApiKeyUsage",
    "BakeInfo",
    "BuildEvent",
    "ClaimLatency",
    "CredentialRule",
    "EgressEntry",
    "ExecResult",
    "FileStat",
    "NetworkPolicy",
    "OutputChunk",
    "PoolInfo",
    "ProcessInfo",
    "ProcessOutput",
    "PruneResult",
    "Resources",
    "SandboxInfo",
    "SandboxUsage",
    "SnapshotInfo",
    "TemplateInfo",
    "UsagePrices",
    "UsageReport",
    "UsageTotal",
    "WriteResult",
    "Terminal",
    "TerminalInfo",
    "TerminalOutput",
    "Terminals",
    "Watch",
    "AsyncWatch",
    "WatchEvent",
]
