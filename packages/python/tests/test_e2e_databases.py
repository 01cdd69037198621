"""End to end: databases (docs/databases.md) from Python, with the host's psql through the URL."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from _support import E2ECase

from warren import ConflictError, Database, InvalidArgumentError, NotFoundError, Sandbox

PSQL = "/usr/lib/postgresql/15/bin/psql"


def sql(url: str, text: str) -> str:
    r = subprocess.run([PSQL, url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", text], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"psql failed: {r.stderr}")
    return r.stdout.strip()


def delete_quietly(db: Database) -> None:
    try:
        db.delete()
    except NotFoundError:
        pass


class Databases(E2ECase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        if not os.path.exists(PSQL):
            raise RuntimeError(f"{PSQL} is missing: install postgresql-client-15 on the host (scripts/setup.sh does)")

    def test_create_branch_url(self) -> None:
        db = Database.create("py_app")
        self.addCleanup(delete_quietly, db)
        self.assertEqual(db.info.state, "running")
        url = db.url()
        password = urlsplit(url).password or ""
        self.assertEqual(len(password), 43)
        sql(url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        branch = db.branch("py_app_b")
        self.addCleanup(delete_quietly, branch)
        self.assertEqual(branch.info.parent, "py_app")
        self.assertTrue(branch.info.branched_at)
        burl = branch.url()
        sql(burl, "INSERT INTO t VALUES (2)")
        self.assertEqual(sql(url, "SELECT count(*) FROM t"), "1")
        self.assertEqual(sql(burl, "SELECT count(*) FROM t"), "2")
        names = [d.name for d in Database.list()]
        self.assertIn("py_app", names)
        self.assertIn("py_app_b", names)
        self.assertNotIn(password, repr(Database.list()))
        self.assertEqual(Database.get("py_app_b").info.parent, "py_app")

    def test_bad_input(self) -> None:
        with self.assertRaises(InvalidArgumentError):
            Database.create("Not-OK")
        with self.assertRaises(NotFoundError):
            Database.get("py_nope")
        db = Database.create("py_dup")
        self.addCleanup(delete_quietly, db)
        with self.assertRaises(ConflictError):
            Database.create("py_dup")

    def test_restore_to_a_moment(self) -> None:
        db = Database.create("py_pitr", retain_seconds=3600)
        self.addCleanup(delete_quietly, db)
        self.assertEqual(db.info.retain_seconds, 3600)
        url = db.url()
        deadline = time.monotonic() + 120
        while not db.refresh().restorable:
            self.assertLess(time.monotonic(), deadline, "no base backup within 120 s")
            time.sleep(0.5)
        sql(url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        time.sleep(1.5)
        moment = datetime.now(timezone.utc)
        time.sleep(1.5)
        sql(url, "INSERT INTO t VALUES (2)")
        time.sleep(1)
        restored = db.restore("py_pitr_r", moment)
        self.addCleanup(delete_quietly, restored)
        self.assertEqual(restored.info.parent, "py_pitr")
        self.assertEqual(sql(restored.url(), "SELECT string_agg(x::text, ',') FROM t"), "1")
        with self.assertRaises(ValueError):
            db.restore("py_pitr_naive", datetime.now())
        with self.assertRaises(InvalidArgumentError):
            db.restore("py_pitr_future", datetime.now(timezone.utc) + timedelta(hours=1))

    def test_workspace_databases(self) -> None:
        ws = Sandbox.create("base", ttl_seconds=600, databases=["py_ws"])
        self.addCleanup(kill_quietly, ws)
        url = ws.exec('printf %s "$DATABASE_URL"').stdout
        self.assertRegex(url, r"^postgres://postgres:[A-Za-z0-9_-]{43}@py_ws\.db\.warren:5432/py_ws$")
        self.assertEqual([(u["alias"], u["owned"], u["env"]) for u in ws.databases()], [("py_ws", True, "DATABASE_URL")])
        sql(Database.get("py_ws").url(), "CREATE TABLE t (x int)")
        a, b = ws.fork_tree(2)
        for child in (a, b):
            self.addCleanup(kill_quietly, child)
            (use,) = child.databases()
            self.assertNotEqual(use["name"], "py_ws")
            self.assertEqual(Database.get(use["name"]).info.parent, "py_ws")
        sql(Database.get(a.databases()[0]["name"]).url(), "INSERT INTO t VALUES (1)")
        self.assertEqual(sql(Database.get(b.databases()[0]["name"]).url(), "SELECT count(*) FROM t"), "0")
        attached = ws.attach_database("py_ws_extra")
        self.assertTrue(attached["owned"])
        self.assertIn("@py_ws_extra.db.warren:5432/py_ws_extra", attached["url"])
        ws.kill()
        deadline = time.time() + 30
        while any(d.name in ("py_ws", "py_ws_extra") for d in Database.list()):
            self.assertLess(time.time(), deadline, "the databases made for the sandbox were not removed with it")
            time.sleep(0.2)


def kill_quietly(sbx: Sandbox) -> None:
    try:
        sbx.kill()
    except NotFoundError:
        pass
