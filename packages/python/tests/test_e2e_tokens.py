"""End to end: sandbox tokens and API keys from Python (docs/security.md): what a token may do
on its sandbox, nothing elsewhere, nothing once revoked; a scoped key sees only its own."""

from __future__ import annotations

import os

from _support import E2ECase, kill_quietly

from warren import ApiKeys, AuthenticationError, NotFoundError, PermissionDeniedError, Sandbox, get_audit_trail


class Tokens(E2ECase):
    def test_token_reaches_its_sandbox_with_its_scopes_only(self) -> None:
        sbx = self.create()
        other = self.create()
        made = sbx.create_token(["read", "exec"], ttl_seconds=600)
        self.assertTrue(made["token"].startswith("wt_"))
        self.assertEqual(made["scopes"], ["read", "exec"])
        agent = Sandbox.connect(sbx.id, api_key=made["token"])
        self.assertEqual(agent.exec("echo from the agent").stdout, "from the agent\n")
        with self.assertRaises(PermissionDeniedError):
            agent.files.read_text("/etc/hostname")
        with self.assertRaises(NotFoundError):
            Sandbox.connect(other.id, api_key=made["token"])
        with self.assertRaises(PermissionDeniedError):
            Sandbox.list(api_key=made["token"])
        self.assertEqual([t["id"] for t in sbx.tokens()], [made["id"]])
        self.assertNotIn("token", sbx.tokens()[0])
        sbx.revoke_token(made["id"])
        with self.assertRaises(AuthenticationError):
            agent.exec("true")
        self.assertNotEqual(made["token"], os.environ.get("WARREN_API_KEY"))


class Keys(E2ECase):
    def test_a_scoped_key_sees_only_its_own_and_its_calls_are_audited(self) -> None:
        made = ApiKeys.create("py team", scopes=["sandboxes:create", "sandboxes:read", "sandboxes:manage"], quotas={"sandboxes": 2})
        self.addCleanup(ApiKeys.revoke, made["id"])
        self.assertTrue(made["key"].startswith("wk_"))
        self.assertEqual(made["quotas"], {"sandboxes": 2})
        mine = Sandbox.create(api_key=made["key"], ttl_seconds=600)
        # With the admin key: the test rotates the team's secret away.
        self.addCleanup(lambda: kill_quietly(Sandbox.connect(mine.id)))
        admins = self.create()
        self.assertEqual([s.id for s in Sandbox.list(api_key=made["key"])], [mine.id])
        with self.assertRaises(NotFoundError):
            Sandbox.connect(admins.id, api_key=made["key"])
        with self.assertRaises(PermissionDeniedError):
            ApiKeys.list(api_key=made["key"])
        self.assertIn(made["id"], [k["id"] for k in ApiKeys.list()])
        calls = get_audit_trail(key=made["id"])
        self.assertEqual([(e["method"], e["path"], e["status"]) for e in calls], [("POST", "/v1/sandboxes", 201)])
        rotated = ApiKeys.rotate(made["id"])
        with self.assertRaises(AuthenticationError):
            Sandbox.list(api_key=made["key"])
        self.assertEqual([s.id for s in Sandbox.list(api_key=rotated["key"])], [mine.id])


class Dashboard(E2ECase):
    def test_a_login_link_opens_one_session_once(self) -> None:
        import http.client
        from urllib.parse import urlsplit

        from warren import dashboard_login_link

        link = dashboard_login_link()
        parts = urlsplit(link["url"])
        self.assertEqual(parts.path, "/ui/login")

        def open_link() -> tuple[int, str, str]:
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
            try:
                conn.request("GET", f"{parts.path}?{parts.query}")
                res = conn.getresponse()
                res.read()
                return res.status, res.getheader("location") or "", res.getheader("set-cookie") or ""
            finally:
                conn.close()

        status, location, cookie = open_link()
        self.assertEqual((status, location), (303, "/ui/"))
        self.assertIn("warren_session=", cookie)
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        # Spent: the same link again logs nobody in.
        status, location, cookie = open_link()
        self.assertEqual((status, location, cookie), (303, "/ui/?login=expired", ""))
