"""What makes creates fast: a template's warm pool (ready sandboxes waiting to be claimed) and
its baked image (a checkpoint taken after the start command became ready)."""

from __future__ import annotations

from urllib.parse import quote

from .client import get_client
from .models import BakeInfo, PoolInfo


def _route(template: str, what: str) -> str:
    return f"/v1/templates/{quote(template, safe='')}/{what}"


def get_pool(template: str, *, url: str | None = None, api_key: str | None = None) -> PoolInfo:
    """The pool's configured size, members ready now, hits, misses and claim latency."""
    return PoolInfo.from_wire(get_client(url, api_key).json("GET", _route(template, "pool")))


def set_pool_size(template: str, size: int, *, url: str | None = None, api_key: str | None = None) -> PoolInfo:
    """Keeps `size` sandboxes of the template ready (0 turns the pool off); refills in the
    background."""
    return PoolInfo.from_wire(get_client(url, api_key).json("PUT", _route(template, "pool"), json={"size": size}))


def get_bake(template: str, *, url: str | None = None, api_key: str | None = None) -> BakeInfo:
    return BakeInfo.from_wire(get_client(url, api_key).json("GET", _route(template, "bake")))


def bake(template: str, *, url: str | None = None, api_key: str | None = None) -> BakeInfo:
    """Bakes the template's current version now and waits for it. A failed bake returns
    state "failed" with the reason: the template stays usable, its creates boot cold."""
    return BakeInfo.from_wire(get_client(url, api_key).json("POST", _route(template, "bake")))
