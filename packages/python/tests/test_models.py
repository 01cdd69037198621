"""Unit tests of the answer types: camelCase wire keys to snake_case fields, nested objects,
user-given keys left alone, fields from a newer daemon kept in `raw`."""

from __future__ import annotations

import unittest

import _support  # noqa: F401  (puts the checkout's warren first on the path)

from warren import PoolInfo, Resources, SandboxInfo, TemplateInfo, UsageReport
from warren.models import snake_case


class Models(unittest.TestCase):
    def test_snake_case(self) -> None:
        cases = {
            "templateVersion": "template_version",
            "memoryMB": "memory_mb",
            "diskMB": "disk_mb",
            "bytesUp": "bytes_up",
            "p50": "p50",
            "from": "from_",
            "id": "id",
            "apiKeyId": "api_key_id",
        }
        for wire, name in cases.items():
            self.assertEqual(snake_case(wire), name)

    def test_nested_objects_and_user_keys(self) -> None:
        info = SandboxInfo.from_wire(
            {"id": "sb-1", "metadata": {"camelCase": "v"}, "resources": {"cpus": 1, "memoryMB": 64, "pids": 32, "diskMB": 64}, "futureField": [1]}
        )
        self.assertEqual(info.metadata, {"camelCase": "v"})
        self.assertEqual(info.resources, Resources(cpus=1, memory_mb=64, pids=32, disk_mb=64))
        self.assertEqual(info.raw["futureField"], [1])
        self.assertIsNone(info.idle_seconds)
        self.assertEqual(TemplateInfo.from_wire({"name": "t", "env": {"MY_VAR": "x"}}).env, {"MY_VAR": "x"})

    def test_resources_to_the_wire(self) -> None:
        self.assertEqual(Resources(cpus=0.5, disk_mb=100).to_wire(), {"cpus": 0.5, "diskMB": 100})
        self.assertEqual(Resources.wire_from({"memory_mb": 1, "pids": 40, "bogus": 1}), {"memoryMB": 1, "pids": 40, "bogus": 1})

    def test_usage_and_pool_reports(self) -> None:
        report = UsageReport.from_wire(
            {
                "since": "a",
                "until": "b",
                "prices": {"currency": "USD", "vcpuHour": 0.05, "gibHour": 0.01},
                "sandboxes": [{"sandboxId": "sb-1", "apiKeyId": "admin", "template": "base", "active": True, "activeSeconds": 2, "vcpuSeconds": 4, "gibSeconds": 4, "cost": 0.1}],
                "apiKeys": [{"apiKeyId": "admin", "sandboxes": 1, "activeSeconds": 2, "vcpuSeconds": 4, "gibSeconds": 4, "cost": 0.1}],
                "total": {"sandboxes": 1, "activeSeconds": 2, "vcpuSeconds": 4, "gibSeconds": 4, "cost": 0.1},
            }
        )
        self.assertEqual((report.prices.vcpu_hour, report.sandboxes[0].sandbox_id, report.api_keys[0].sandboxes, report.total.vcpu_seconds), (0.05, "sb-1", 1, 4))
        pool = PoolInfo.from_wire({"template": "t", "size": 1, "bootFailures": 2, "claimMs": {"p50": 1, "p95": 2, "p99": 3, "count": 4}})
        self.assertEqual((pool.boot_failures, pool.claim_ms and pool.claim_ms.p99), (2, 3))
        self.assertIsNone(PoolInfo.from_wire({"claimMs": None}).claim_ms)


if __name__ == "__main__":
    unittest.main()
