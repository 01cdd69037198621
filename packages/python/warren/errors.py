"""Errors. Every error the SDK raises is a WarrenError; the one mapping from the API's
stable error codes to classes is `error_from_body` (the TS SDK's errors.ts has the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .models import ExecResult


class WarrenError(Exception):
    """Base of every SDK error. `code` is the API's stable error code, or "network" when the
    daemon could not be reached; `status` the HTTP status when there was a response."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        request_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details: dict[str, Any] | None = dict(details) if details is not None else None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, status={self.status!r})"


class InvalidArgumentError(WarrenError):
    """400: a field is wrong; the message names it."""


class AuthenticationError(WarrenError):
    """401: no API key or a wrong one."""


class PermissionDeniedError(WarrenError):
    """403: the sandbox user may not read or write that path."""


class NotFoundError(WarrenError):
    """404: no such sandbox (or it was killed or died), template, file or process."""


class ConflictError(WarrenError):
    """409: already exists, not empty, in use, a second daemon."""


class FailedPreconditionError(ConflictError):
    """409: not in a state that allows it (the process already exited). A ConflictError, as
    the TS SDK maps both codes to one class."""


class TooLargeError(WarrenError):
    """413: a body over the limit, or an upload over what is left of the sandbox's disk."""


class ResourceExhaustedError(WarrenError):
    """429: no space left in the sandbox."""


class InternalError(WarrenError):
    """500: a bug or a runsc failure; the daemon's log has the details under `request_id`."""


class UnavailableError(WarrenError):
    """503: the sandbox's agent is unreachable right now (or a stream ended early)."""


class DeadlineExceededError(WarrenError):
    """504: the agent did not answer in time. Named after the API code so it does not hide
    Python's builtin TimeoutError; `warren.TimeoutError` is an alias kept out of `__all__`."""


class NetworkError(WarrenError):
    """The daemon could not be reached, or the connection broke mid-answer."""

    def __init__(self, message: str) -> None:
        super().__init__("network", message)


class CommandError(WarrenError):
    """Raised by `exec(..., check=True)` when the command exits non-zero or times out;
    `result` is the whole ExecResult."""

    def __init__(self, command: str, result: ExecResult) -> None:
        why = "timed out" if result.timed_out else f"exited with code {result.exit_code}"
        tail = "\n".join(result.stderr.strip().split("\n")[-3:])
        super().__init__("failed_precondition", f"command {_quote(command)} {why}{f': {tail}' if tail else ''}")
        self.command = command
        self.result = result

    @property
    def exit_code(self) -> int | None:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def timed_out(self) -> bool:
        return self.result.timed_out


class TemplateBuildError(WarrenError):
    """A template build failed; for a failed step, `step`, `exit_code` and `output` (its
    last 40 lines) say where and why."""

    def __init__(
        self,
        code: str,
        message: str,
        step: int | None = None,
        exit_code: int | None = None,
        output: str | None = None,
    ) -> None:
        super().__init__(code, message)
        self.step = step
        self.exit_code = exit_code
        self.output = output


def _quote(s: str) -> str:
    # JSON-style quoting, as the TS SDK's JSON.stringify: one line, escapes visible.
    import json

    return json.dumps(s, ensure_ascii=False)


CLASSES: dict[str, type[WarrenError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": AuthenticationError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "failed_precondition": FailedPreconditionError,
    "too_large": TooLargeError,
    "resource_exhausted": ResourceExhaustedError,
    "internal": InternalError,
    "unavailable": UnavailableError,
    "deadline_exceeded": DeadlineExceededError,
}

# A body without a code (a proxy's page, an empty 502) still gets the class its status means.
_CODE_OF_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    429: "resource_exhausted",
    503: "unavailable",
    504: "deadline_exceeded",
}


def error_from_body(status: int, body: Any, request_id: str | None = None) -> WarrenError:
    """The error for an API error answer `{"error": {code, message, requestId?, details?}}`."""
    err = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(err, Mapping):
        err = {}
    code = err.get("code")
    if not isinstance(code, str) or not code:
        code = _CODE_OF_STATUS.get(status, "internal")
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = f"HTTP {status}"
    body_request_id = err.get("requestId")
    if isinstance(body_request_id, str) and body_request_id:
        # A server-side failure names its request: the daemon's log has the details under it.
        message = f"{message} (request {body_request_id}; details in the daemon log)"
        request_id = body_request_id
    details = err.get("details")
    cls = CLASSES.get(code, WarrenError)
    return cls(code, message, status=status, request_id=request_id, details=details if isinstance(details, Mapping) else None)
