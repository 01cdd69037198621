"""Unit tests of the error hierarchy and of the one mapping from API answers to classes."""

from __future__ import annotations

import builtins
import unittest

from _support import FakeDaemon, Reply

import warren
from warren import (
    AuthenticationError,
    CommandError,
    ConflictError,
    DeadlineExceededError,
    ExecResult,
    FailedPreconditionError,
    HttpClient,
    InternalError,
    InvalidArgumentError,
    NetworkError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    TooLargeError,
    UnavailableError,
    WarrenError,
    error_from_body,
)

CODES = {
    "invalid_argument": (400, InvalidArgumentError),
    "unauthenticated": (401, AuthenticationError),
    "permission_denied": (403, PermissionDeniedError),
    "not_found": (404, NotFoundError),
    "conflict": (409, ConflictError),
    "failed_precondition": (409, FailedPreconditionError),
    "too_large": (413, TooLargeError),
    "resource_exhausted": (429, ResourceExhaustedError),
    "internal": (500, InternalError),
    "unavailable": (503, UnavailableError),
    "deadline_exceeded": (504, DeadlineExceededError),
}


class Mapping(unittest.TestCase):
    def test_every_code_has_its_class(self) -> None:
        for code, (status, cls) in CODES.items():
            err = error_from_body(status, {"error": {"code": code, "message": f"m-{code}", "details": {"field": "x"}}})
            self.assertIs(type(err), cls, code)
            self.assertIsInstance(err, WarrenError)
            self.assertEqual((err.code, err.status, err.message, str(err), err.details), (code, status, f"m-{code}", f"m-{code}", {"field": "x"}))

    def test_failed_precondition_is_a_conflict_as_in_the_ts_sdk(self) -> None:
        self.assertTrue(issubclass(FailedPreconditionError, ConflictError))

    def test_a_server_side_failure_names_its_request_in_the_message(self) -> None:
        err = error_from_body(500, {"error": {"code": "internal", "message": "fork failed", "requestId": "r-123"}}, request_id="header-id")
        self.assertEqual(str(err), "fork failed (request r-123; details in the daemon log)")
        self.assertEqual(err.request_id, "r-123")

    def test_answers_without_a_code_get_the_class_of_their_status(self) -> None:
        self.assertIs(type(error_from_body(404, None)), NotFoundError)
        self.assertIs(type(error_from_body(401, "")), AuthenticationError)
        self.assertIs(type(error_from_body(502, {})), InternalError)
        self.assertEqual(str(error_from_body(502, {})), "HTTP 502")

    def test_an_unknown_code_is_a_plain_warren_error(self) -> None:
        err = error_from_body(418, {"error": {"code": "teapot", "message": "short and stout"}})
        self.assertIs(type(err), WarrenError)
        self.assertEqual(err.code, "teapot")

    def test_the_timeout_alias_does_not_hide_the_builtin(self) -> None:
        self.assertIs(warren.TimeoutError, DeadlineExceededError)
        self.assertNotIn("TimeoutError", warren.__all__)
        namespace: dict[str, object] = {}
        exec("from warren import *", namespace)
        self.assertNotIn("TimeoutError", namespace)
        self.assertIs(builtins.TimeoutError, TimeoutError)

    def test_command_error_carries_the_result(self) -> None:
        result = ExecResult(pid=1, exit_code=2, stdout="out", stderr="\n\nerr\n", timed_out=False, duration_ms=3)
        err = CommandError("make test", result)
        self.assertIs(err.result, result)
        self.assertEqual((err.exit_code, err.stdout, err.stderr, err.timed_out, err.command), (2, "out", "\n\nerr\n", False, "make test"))
        self.assertEqual(str(err), 'command "make test" exited with code 2: err')

    def test_network_errors_have_the_network_code(self) -> None:
        self.assertEqual(NetworkError("down").code, "network")


class FromTheWire(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeDaemon()
        self.addCleanup(self.fake.close)
        self.client = HttpClient(self.fake.url, "k")
        self.addCleanup(self.client.close)

    def test_status_body_and_request_id_header_reach_the_error(self) -> None:
        self.fake.route(
            "POST",
            "/v1/sandboxes/sb-1/processes/7/stdin",
            Reply(409, json={"error": {"code": "failed_precondition", "message": "process 7 has exited"}}, headers={"X-Request-Id": "rid-1"}),
        )
        with self.assertRaises(FailedPreconditionError) as caught:
            self.client.json("POST", "/v1/sandboxes/sb-1/processes/7/stdin", json={"data": "x"})
        err = caught.exception
        self.assertEqual((err.status, str(err), err.request_id), (409, "process 7 has exited", "rid-1"))

    def test_a_body_that_is_not_json_becomes_the_message(self) -> None:
        self.fake.route("GET", "/x", Reply(502, body=b"bad gateway\n"))
        with self.assertRaises(InternalError) as caught:
            self.client.json("GET", "/x")
        self.assertEqual(str(caught.exception), "bad gateway")

    def test_the_connection_is_reused_after_an_error_answer(self) -> None:
        self.fake.route("GET", "/x", Reply(404, json={"error": {"code": "not_found", "message": "no"}}))
        for _ in range(3):
            with self.assertRaises(NotFoundError):
                self.client.json("GET", "/x")
        self.assertEqual(self.fake.connections, 1)


if __name__ == "__main__":
    unittest.main()
