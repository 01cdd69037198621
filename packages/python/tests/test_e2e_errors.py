"""End to end: bad input raises the right class with the daemon's own message."""

from __future__ import annotations

from _support import E2ECase

from warren import AuthenticationError, InvalidArgumentError, NetworkError, NotFoundError, Resources, Sandbox


class Errors(E2ECase):
    def test_bad_create_options_name_the_field(self) -> None:
        with self.assertRaises(InvalidArgumentError) as caught:
            Sandbox.create(resources=Resources(cpus=0.001))
        self.assertEqual(str(caught.exception), "resources.cpus must be at least 0.1 (got 0.001)")
        self.assertEqual((caught.exception.code, caught.exception.status), ("invalid_argument", 400))
        with self.assertRaises(InvalidArgumentError) as caught:
            Sandbox.create(ttl_seconds=0)
        self.assertEqual(str(caught.exception), "ttlSeconds must be at least 1 (got 0)")
        with self.assertRaises(NotFoundError) as missing:
            Sandbox.create(template="no-such-template")
        self.assertIn("unknown template 'no-such-template'", str(missing.exception))

    def test_missing_sandboxes_wrong_keys_and_no_daemon(self) -> None:
        with self.assertRaises(NotFoundError) as caught:
            Sandbox.connect("sb-doesnotexist")
        self.assertIn("sb-doesnotexist", str(caught.exception))
        with self.assertRaises(AuthenticationError):
            Sandbox.list(api_key="wk_wrong")
        with self.assertRaises(NetworkError):
            Sandbox.list(url="http://127.0.0.1:1")

    def test_bad_calls_on_a_sandbox(self) -> None:
        sbx = self.create()
        with self.assertRaises(InvalidArgumentError) as caught:
            sbx.exec("true", user="Bad User")
        self.assertIn("user", str(caught.exception))
        with self.assertRaises(InvalidArgumentError) as caught:
            sbx.fork_tree(17)
        self.assertIn("count must be at most 16", str(caught.exception))
        with self.assertRaises(InvalidArgumentError) as caught:
            sbx.set_network(["not a rule!"])
        self.assertIn("network.allow", str(caught.exception))
        sbx.kill()
        with self.assertRaises(NotFoundError):
            sbx.exec("true")
        with self.assertRaises(NotFoundError):
            sbx.files.read("/etc/hostname")
