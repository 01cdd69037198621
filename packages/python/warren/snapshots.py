"""Snapshots: list, get and delete (take one with `sandbox.snapshot()`)."""

from __future__ import annotations

from typing import List
from urllib.parse import quote

from .client import get_client
from .models import SnapshotInfo


class Snapshots:
    """Namespace for the snapshot calls, as the TS SDK's `Snapshots` object."""

    @staticmethod
    def list(*, url: str | None = None, api_key: str | None = None) -> List[SnapshotInfo]:
        return [SnapshotInfo.from_wire(s) for s in get_client(url, api_key).json("GET", "/v1/snapshots")["snapshots"]]

    @staticmethod
    def get(snapshot_id: str, *, url: str | None = None, api_key: str | None = None) -> SnapshotInfo:
        return SnapshotInfo.from_wire(get_client(url, api_key).json("GET", f"/v1/snapshots/{quote(snapshot_id, safe='')}"))

    @staticmethod
    def delete(snapshot_id: str, *, url: str | None = None, api_key: str | None = None) -> None:
        get_client(url, api_key).json("DELETE", f"/v1/snapshots/{quote(snapshot_id, safe='')}")
