"""End to end: templates (list, build with progress events, a failing step, delete), baked
images and warm pools, usage, and pruning the build cache."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from _support import E2ECase, eventually, kill_quietly

from warren import BuildEvent, ConflictError, NotFoundError, Template, TemplateBuildError, bake, get_bake, get_pool, get_usage, set_pool_size


class Templates(E2ECase):
    def test_the_base_template_its_bake_and_pool(self) -> None:
        self.assertIn("base", [t.name for t in Template.list()])
        base = Template.get("base")
        self.assertEqual((base.name, base.from_), ("base", "debian:bookworm"))
        self.assertTrue(base.version)
        info = get_bake("base")
        self.assertEqual(info.state, "none")
        self.assertTrue(info.reason)
        self.assertEqual(get_pool("base").template, "base")
        with self.assertRaises(NotFoundError):
            Template.get("no-such-template")

    def test_build_with_progress_then_bake_pool_and_delete(self) -> None:
        name = f"py-{uuid.uuid4().hex[:8]}"
        events: list[BuildEvent] = []
        recipe = (
            Template.from_("base")
            .run("mkdir -p /srv && echo hello from the template > /srv/index.html")
            .env({"GREETING": "hi"})
            .workdir("/srv")
            .start("python3 -m http.server 8080")
            .ready_port(8080, timeout_seconds=60)
        )
        info = recipe.build(name, on_event=events.append)
        self.addCleanup(self._delete, name)
        self.assertEqual((info.name, info.workdir, info.env.get("GREETING")), (name, "/srv", "hi"))
        kinds = [e.type for e in events]
        self.assertEqual(kinds[0], "step")
        self.assertEqual(kinds[-1], "done")
        self.assertIn("step_done", kinds)
        self.assertEqual(max(e.total or 0 for e in events), 4)

        baked = bake(name)
        self.assertEqual(baked.state, "ready", f"bake failed: {baked.error}")
        sbx = self.create(template=name)
        self.assertEqual(sbx.info.boot, "baked")
        self.assertEqual(sbx.exec("curl -s http://127.0.0.1:8080/index.html").stdout, "hello from the template\n")
        self.assertEqual(sbx.exec("pwd; echo $GREETING").stdout, "/srv\nhi\n")

        self.assertEqual(set_pool_size(name, 1).size, 1)
        eventually(lambda: get_pool(name).ready == 1, 120, "the warm pool to fill")
        pooled = self.create(template=name)
        self.assertEqual(pooled.info.boot, "pool")
        self.assertEqual(get_pool(name).hits, 1)
        self.assertEqual(set_pool_size(name, 0).size, 0)
        for s in (sbx, pooled):
            kill_quietly(s)

    def test_a_failing_step_says_which_and_why(self) -> None:
        with self.assertRaises(TemplateBuildError) as caught:
            Template.from_("base").run("echo about to fail; exit 3").build(f"py-bad-{uuid.uuid4().hex[:8]}")
        err = caught.exception
        self.assertEqual((err.step, err.exit_code), (2, 3))
        self.assertIn("about to fail", err.output or "")

    def test_usage_and_prune(self) -> None:
        since = datetime.now(timezone.utc) - timedelta(minutes=1)
        sbx = self.create()
        report = get_usage(since=since)
        self.assertEqual(report.prices.currency, "USD")
        mine = [u for u in report.sandboxes if u.sandbox_id == sbx.id]
        self.assertEqual(len(mine), 1)
        self.assertTrue(mine[0].active)
        self.assertEqual(mine[0].api_key_id, "admin")
        self.assertGreaterEqual(report.total.sandboxes, 1)
        self.assertEqual(get_usage(since=since, api_key_id="nobody").sandboxes, [])
        pruned = Template.prune_layers()
        self.assertGreaterEqual(pruned.kept + pruned.removed, 0)

    def _delete(self, name: str) -> None:
        def gone() -> bool:
            try:
                Template.delete(name)
            except ConflictError:
                return False  # pool members still stopping
            except NotFoundError:
                pass
            return True

        eventually(gone, 60, f"template {name} to be deletable")
