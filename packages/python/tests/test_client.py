"""Unit tests of the HTTP layer against a fake daemon on 127.0.0.1: request building,
keep-alive reuse, threads, the stale-connection retry, uploads, connection defaults."""

from __future__ import annotations

import io
import os
import tempfile
import threading
import unittest
from concurrent.futures import ThreadPoolExecutor
from typing import Callable
from unittest import mock

from _support import FakeDaemon, Recorded, Reply

from warren import CredentialRule, HttpClient, NetworkError, Resources, Sandbox, SandboxInfo, SnapshotInfo, get_client, resolve_api_key, resolve_url

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


class FakeDaemonCase(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeDaemon()
        self.addCleanup(self.fake.close)
        self.fake.route("GET", "/v1/sandboxes/sb-1", Reply(json=SANDBOX))


def _info() -> SandboxInfo:
    return SandboxInfo.from_wire(SANDBOX)


class RequestBuilding(FakeDaemonCase):
    def test_create_sends_every_option_in_wire_form_with_the_key(self) -> None:
        self.fake.route("POST", "/v1/sandboxes", Reply(201, json=SANDBOX))
        snap = SnapshotInfo(id="snap-abc")
        sbx = Sandbox.create(
            template="base",
            ttl_seconds=60,
            metadata={"task": "t-1", "camelKey": "kept"},
            env={"FOO_BAR": "1"},
            resources=Resources(cpus=1, memory_mb=512),
            idle_seconds=30,
            snapshot=snap,
            allow=["example.com:443"],
            credentials=[CredentialRule(host="example.com:443", headers={"Authorization": "Bearer x"}), {"host": "a.b", "headers": {}}],
            url=self.fake.url,
            api_key="key-1",
        )
        self.assertEqual(sbx.id, "sb-1")
        self.assertEqual(sbx.info.resources.memory_mb, 2048)
        req = self.fake.requests[-1]
        self.assertEqual(req.headers["authorization"], "Bearer key-1")
        self.assertEqual(req.headers["content-type"], "application/json")
        self.assertEqual(
            req.json(),
            {
                "template": "base",
                "ttlSeconds": 60,
                "metadata": {"task": "t-1", "camelKey": "kept"},
                "env": {"FOO_BAR": "1"},
                "resources": {"cpus": 1, "memoryMB": 512},
                "idleSeconds": 30,
                "snapshot": "snap-abc",
                "network": {
                    "allow": ["example.com:443"],
                    "credentials": [{"host": "example.com:443", "headers": {"Authorization": "Bearer x"}}, {"host": "a.b", "headers": {}}],
                },
            },
        )

    def test_create_with_no_options_sends_an_empty_object_and_resources_as_a_dict(self) -> None:
        self.fake.route("POST", "/v1/sandboxes", Reply(201, json=SANDBOX))
        Sandbox.create(url=self.fake.url, api_key="k")
        self.assertEqual(self.fake.requests[-1].json(), {})
        Sandbox.create(resources={"memory_mb": 256, "diskMB": 100, "cpus": None}, url=self.fake.url, api_key="k")
        self.assertEqual(self.fake.requests[-1].json(), {"resources": {"memoryMB": 256, "diskMB": 100}})

    def test_query_values_are_encoded_and_unset_ones_left_out(self) -> None:
        self.fake.route("GET", "/v1/sandboxes/sb-1/files", Reply(body=b"x"))
        sbx = Sandbox.connect("sb-1", url=self.fake.url, api_key="k")
        path = "/work/a b/ü&x=1?#.txt"
        self.assertEqual(sbx.files.read(path), b"x")
        self.assertEqual(self.fake.requests[-1].query, {"path": path})
        sbx.files.read("rel", user="root")
        self.assertEqual(self.fake.requests[-1].query, {"path": "rel", "user": "root"})

    def test_list_follows_cursors_and_filters_by_metadata(self) -> None:
        def page(req: Recorded) -> Reply:
            if req.query.get("cursor") == "c2":
                return Reply(json={"sandboxes": [{**SANDBOX, "id": "sb-2"}]})
            return Reply(json={"sandboxes": [SANDBOX], "nextCursor": "c2"})

        self.fake.route("GET", "/v1/sandboxes", page)
        found = Sandbox.list(state="running", metadata={"task": "x y"}, url=self.fake.url, api_key="k")
        self.assertEqual([s.id for s in found], ["sb-1", "sb-2"])
        self.assertEqual(self.fake.requests[0].query, {"state": "running", "metadata.task": "x y"})
        self.assertEqual(self.fake.requests[1].query, {"state": "running", "metadata.task": "x y", "cursor": "c2"})

    def test_a_url_with_a_path_keeps_it_as_a_prefix(self) -> None:
        self.fake.route("GET", "/prefix/v1/sandboxes/sb-1", Reply(json=SANDBOX))
        Sandbox.connect("sb-1", url=self.fake.url + "/prefix/", api_key="k")
        self.assertEqual(self.fake.requests[-1].path, "/prefix/v1/sandboxes/sb-1")

    def test_ids_are_escaped_in_paths(self) -> None:
        with self.assertRaises(Exception):
            Sandbox.connect("../x y", url=self.fake.url, api_key="k")
        self.assertEqual(self.fake.requests[-1].path, "/v1/sandboxes/..%2Fx%20y")

    def test_sandbox_calls_send_the_documented_bodies(self) -> None:
        sbx = Sandbox.connect("sb-1", url=self.fake.url, api_key="k")
        self.fake.route("POST", "/v1/sandboxes/sb-1/ttl", Reply(json={**SANDBOX, "expiresAt": "later"}))
        self.fake.route("POST", "/v1/sandboxes/sb-1/fork", Reply(201, json={"sandboxes": [{**SANDBOX, "id": "sb-c1"}, {**SANDBOX, "id": "sb-c2"}]}))
        self.fake.route("POST", "/v1/sandboxes/sb-1/ports/3000/url", Reply(201, json={"url": "http://3000-sb-1.localhost/", "expiresAt": "x"}))
        self.fake.route("PUT", "/v1/sandboxes/sb-1/network", lambda r: Reply(json=r.json()))
        self.fake.route("GET", "/v1/sandboxes/sb-1/egress", Reply(json={"entries": [{"id": 1, "host": "h", "port": 443, "bytesUp": 3, "decision": "denied"}]}))
        self.assertEqual(sbx.set_ttl(120).expires_at, "later")
        self.assertEqual(sbx.info.expires_at, "later")
        self.assertEqual(self.fake.requests[-1].json(), {"ttlSeconds": 120})
        children = sbx.fork_tree(2, metadata={"a": "1"}, ttl_seconds=10)
        self.assertEqual([c.id for c in children], ["sb-c1", "sb-c2"])
        self.assertEqual(self.fake.requests[-1].json(), {"count": 2, "metadata": {"a": "1"}, "ttlSeconds": 10})
        self.assertEqual(sbx.fork().id, "sb-c1")
        self.assertEqual(self.fake.requests[-1].json(), {"count": 1})
        self.assertEqual(sbx.get_url(3000), "http://3000-sb-1.localhost/")
        self.assertEqual(self.fake.requests[-1].json(), {})
        policy = sbx.set_network(["a.com"], [CredentialRule(host="a.com", headers={"X": "1"})])
        self.assertEqual(policy.allow, ["a.com"])
        self.assertEqual(policy.credentials, [CredentialRule(host="a.com", headers={"X": "1"})])
        sbx.set_network([])
        self.assertEqual(self.fake.requests[-1].json(), {"allow": []})
        entries = sbx.egress_log(after=5, limit=10)
        self.assertEqual(self.fake.requests[-1].query, {"after": "5", "limit": "10"})
        self.assertEqual((entries[0].bytes_up, entries[0].decision, entries[0].bytes_down), (3, "denied", 0))

    def test_a_string_allow_list_is_refused_before_sending(self) -> None:
        from warren import InvalidArgumentError

        sbx = Sandbox.connect("sb-1", url=self.fake.url, api_key="k")
        sent = len(self.fake.requests)
        with self.assertRaises(InvalidArgumentError):
            sbx.set_network("example.com")
        self.assertEqual(len(self.fake.requests), sent)


class Connections(FakeDaemonCase):
    def test_sequential_requests_reuse_one_keep_alive_connection(self) -> None:
        client = HttpClient(self.fake.url, "k")
        for _ in range(5):
            client.json("GET", "/v1/sandboxes/sb-1")
        self.assertEqual(self.fake.connections, 1)

    def test_many_threads_share_a_client_safely(self) -> None:
        self.fake.route("GET", "/echo", lambda r: Reply(json={"n": r.query["n"]}))
        client = HttpClient(self.fake.url, "k")

        def call(n: int) -> str:
            return str(client.json("GET", "/echo", query={"n": n})["n"])

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(call, range(400)))
        self.assertEqual(answers, [str(n) for n in range(400)])
        self.assertLessEqual(self.fake.connections, 16 + 1)

    def test_a_stale_keep_alive_connection_is_retried_once_for_a_get(self) -> None:
        self.fake.route("GET", "/v1/sandboxes/sb-1", self._reset_second_on_first_connection(Reply(json=SANDBOX)))
        client = HttpClient(self.fake.url, "k")
        client.json("GET", "/v1/sandboxes/sb-1")
        self.assertEqual(client.json("GET", "/v1/sandboxes/sb-1")["id"], "sb-1")
        self.assertEqual([r.connection for r in self.fake.requests], [1, 1, 2])

    def test_a_delete_on_a_stale_connection_is_sent_again(self) -> None:
        self.fake.route("DELETE", "/v1/sandboxes/sb-1", self._reset_second_on_first_connection(Reply(status=204)))
        client = HttpClient(self.fake.url, "k")
        client.json("DELETE", "/v1/sandboxes/sb-1")
        self.assertIsNone(client.json("DELETE", "/v1/sandboxes/sb-1"))
        self.assertEqual([r.connection for r in self.fake.requests], [1, 1, 2])

    def test_a_post_on_a_stale_connection_is_not_sent_again(self) -> None:
        self.fake.route("POST", "/v1/sandboxes/sb-1/hibernate", self._reset_second_on_first_connection(Reply(json=SANDBOX)))
        client = HttpClient(self.fake.url, "k")
        client.json("POST", "/v1/sandboxes/sb-1/hibernate")
        with self.assertRaises(NetworkError):
            client.json("POST", "/v1/sandboxes/sb-1/hibernate")
        self.assertEqual([r.connection for r in self.fake.requests], [1, 1])

    def test_a_reset_on_a_fresh_connection_is_not_retried(self) -> None:
        self.fake.route("GET", "/gone", Reply(reset=True))
        with self.assertRaises(NetworkError):
            HttpClient(self.fake.url, "k").json("GET", "/gone")
        self.assertEqual(len(self.fake.requests), 1)

    def test_an_upload_from_a_seekable_file_is_replayed_from_where_it_started(self) -> None:
        self.fake.route("PUT", "/v1/sandboxes/sb-1/files", self._reset_second_on_first_connection(Reply(json={"size": 0, "path": "/x"})))
        sbx = Sandbox(HttpClient(self.fake.url, "k"), _info())
        sbx.files.write("/x", b"first")
        f = io.BytesIO(b"skip:" + b"0123456789" * 50_000)
        f.seek(5)
        sbx.files.write("/x", f)
        self.assertEqual([r.connection for r in self.fake.requests], [1, 1, 2])
        self.assertEqual(self.fake.requests[-1].body, b"0123456789" * 50_000)
        self.assertEqual(self.fake.requests[-1].headers["content-length"], str(500_000))

    def test_an_upload_from_an_iterator_is_not_replayed(self) -> None:
        self.fake.route("PUT", "/v1/sandboxes/sb-1/files", self._reset_second_on_first_connection(Reply(json={"size": 0, "path": "/x"})))
        sbx = Sandbox(HttpClient(self.fake.url, "k"), _info())
        sbx.files.write("/x", b"first")
        with self.assertRaises(NetworkError):
            sbx.files.write("/x", iter([b"a", b"b"]))
        self.assertEqual(len(self.fake.requests), 2)

    def test_an_unreachable_daemon_is_a_network_error_naming_it(self) -> None:
        with self.assertRaises(NetworkError) as caught:
            HttpClient("http://127.0.0.1:1", "k").json("GET", "/v1/health")
        self.assertIn("127.0.0.1:1", str(caught.exception))
        self.assertEqual(caught.exception.code, "network")

    def _reset_second_on_first_connection(self, ok: Reply) -> Callable[[Recorded], Reply]:
        seen = {"n": 0}

        def route(req: Recorded) -> Reply:
            if req.connection == 1:
                seen["n"] += 1
                if seen["n"] == 2:
                    return Reply(reset=True)
            return ok

        return route


class Uploads(FakeDaemonCase):
    def setUp(self) -> None:
        super().setUp()
        self.fake.route("PUT", "/v1/sandboxes/sb-1/files", lambda r: Reply(json={"size": len(r.body), "path": r.query["path"]}))
        self.files = Sandbox(HttpClient(self.fake.url, "k"), _info()).files

    def test_bytes_and_text_are_sent_with_their_length(self) -> None:
        self.assertEqual(self.files.write("/a", b"\x00\xff").size, 2)
        self.assertEqual(self.fake.requests[-1].headers["content-type"], "application/octet-stream")
        self.assertEqual(self.fake.requests[-1].headers["content-length"], "2")
        self.files.write("/a", "héllo", mode=0o755, user="root")
        req = self.fake.requests[-1]
        self.assertEqual(req.body, "héllo".encode())
        self.assertEqual(req.query, {"path": "/a", "mode": "755", "user": "root"})

    def test_a_binary_file_is_streamed_with_its_length(self) -> None:
        with tempfile.TemporaryFile() as f:
            f.write(os.urandom(3 * 1024 * 1024 + 7))
            f.seek(0)
            self.assertEqual(self.files.write("/big", f).size, 3 * 1024 * 1024 + 7)
        req = self.fake.requests[-1]
        self.assertFalse(req.chunked)
        self.assertEqual(req.headers["content-length"], str(3 * 1024 * 1024 + 7))

    def test_iterators_pipes_and_text_files_go_chunked(self) -> None:
        self.files.write("/it", (bytes([i]) * 1000 for i in range(10)))
        self.assertTrue(self.fake.requests[-1].chunked)
        self.assertEqual(self.fake.requests[-1].body, b"".join(bytes([i]) * 1000 for i in range(10)))
        r, w = os.pipe()
        os.write(w, b"from a pipe")
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            self.files.write("/pipe", pipe)
        self.assertTrue(self.fake.requests[-1].chunked)
        self.assertEqual(self.fake.requests[-1].body, b"from a pipe")
        self.files.write("/text", io.StringIO("ünïcode"))
        self.assertEqual(self.fake.requests[-1].body, "ünïcode".encode())

    def test_a_file_that_shrinks_while_sent_fails_instead_of_hanging(self) -> None:
        from warren import WarrenError

        class Shrinking(io.BytesIO):
            def read(self, n: int | None = -1) -> bytes:
                return super().read(min(n or 0, 10)) if self.tell() < 10 else b""

        with self.assertRaises(WarrenError) as caught:
            self.files.write("/s", Shrinking(b"x" * 100))
        self.assertIn("short", str(caught.exception))


class Defaults(unittest.TestCase):
    def test_url_defaults_to_the_environment_then_localhost(self) -> None:
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(resolve_url(), "http://127.0.0.1:7070")
            self.assertEqual(resolve_url("http://127.0.0.1:9/"), "http://127.0.0.1:9")
        with mock.patch.dict(os.environ, {"WARREN_URL": "http://127.0.0.2:8080/"}):
            self.assertEqual(resolve_url(), "http://127.0.0.2:8080")

    def test_key_comes_from_the_argument_the_environment_or_the_admin_key_file(self) -> None:
        with tempfile.TemporaryDirectory() as home:
            with open(os.path.join(home, "admin.key"), "w") as f:
                f.write("wk_file\n")
            with mock.patch.dict(os.environ, {"WARREN_HOME": home}, clear=True):
                self.assertEqual(resolve_api_key(), "wk_file")
                self.assertEqual(resolve_api_key("wk_arg"), "wk_arg")
            with mock.patch.dict(os.environ, {"WARREN_HOME": home, "WARREN_API_KEY": "wk_env"}, clear=True):
                self.assertEqual(resolve_api_key(), "wk_env")
            with mock.patch.dict(os.environ, {"WARREN_HOME": os.path.join(home, "none")}, clear=True):
                self.assertIsNone(resolve_api_key())

    def test_clients_are_shared_per_daemon_and_key(self) -> None:
        a = get_client("http://127.0.0.1:7", "k1")
        self.assertIs(a, get_client("http://127.0.0.1:7/", "k1"))
        self.assertIsNot(a, get_client("http://127.0.0.1:7", "k2"))

    def test_the_key_is_not_in_the_repr(self) -> None:
        self.assertNotIn("secret", repr(HttpClient("http://127.0.0.1:7", "secret")))

    def test_a_url_that_is_not_http_is_refused(self) -> None:
        from warren import InvalidArgumentError

        with self.assertRaises(InvalidArgumentError):
            HttpClient("ftp://127.0.0.1", "k")


if __name__ == "__main__":
    unittest.main()
