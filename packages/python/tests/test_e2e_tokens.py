"""End to end: sandbox tokens from Python (docs/security.md, "Sandbox tokens"): what a token
may do on its sandbox, nothing elsewhere, and nothing once revoked."""

from __future__ import annotations

import os

from _support import E2ECase

from warren import AuthenticationError, NotFoundError, PermissionDeniedError, Sandbox


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
