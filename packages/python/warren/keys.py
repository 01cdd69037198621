"""API keys and the API audit trail (admin keys only; docs/security.md): keys for other
callers with scopes, quotas and an expiry, each seeing only what it made."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from .client import get_client


class ApiKeys:
    """`/v1/keys`. Secrets come back once, from create and rotate, under "key"."""

    @staticmethod
    def create(
        name: str,
        *,
        scopes: list[str] | None = None,
        expires_in_seconds: int | None = None,
        quotas: dict[str, float] | None = None,
        egress: list[str] | None = None,
        url: str | None = None,
        api_key: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if scopes is not None:
            body["scopes"] = scopes
        if expires_in_seconds is not None:
            body["expiresInSeconds"] = expires_in_seconds
        if quotas is not None:
            body["quotas"] = quotas
        if egress is not None:
            body["egress"] = egress
        return dict(get_client(url, api_key).json("POST", "/v1/keys", json=body))

    @staticmethod
    def list(*, url: str | None = None, api_key: str | None = None) -> list[dict[str, Any]]:
        return list(get_client(url, api_key).json("GET", "/v1/keys")["keys"])

    @staticmethod
    def get(key_id: str, *, url: str | None = None, api_key: str | None = None) -> dict[str, Any]:
        return dict(get_client(url, api_key).json("GET", f"/v1/keys/{quote(key_id, safe='')}"))

    @staticmethod
    def rotate(key_id: str, *, url: str | None = None, api_key: str | None = None) -> dict[str, Any]:
        """A new secret; the old one stops working at once."""
        return dict(get_client(url, api_key).json("POST", f"/v1/keys/{quote(key_id, safe='')}/rotate"))

    @staticmethod
    def revoke(key_id: str, *, url: str | None = None, api_key: str | None = None) -> dict[str, Any]:
        """The key (and every token it made) stops working; what it made keeps running."""
        return dict(get_client(url, api_key).json("DELETE", f"/v1/keys/{quote(key_id, safe='')}"))


def get_audit_trail(
    *,
    key: str | None = None,
    sandbox: str | None = None,
    since: datetime | str | None = None,
    after: int | None = None,
    limit: int | None = None,
    url: str | None = None,
    api_key: str | None = None,
) -> list[dict[str, Any]]:
    """Every call that changed something, oldest first: time, keyId, method, path,
    sandboxId, status, requestId."""
    query = {
        "key": key,
        "sandbox": sandbox,
        "since": since.isoformat() if isinstance(since, datetime) else since,
        "after": after,
        "limit": limit,
    }
    return list(get_client(url, api_key).json("GET", "/v1/audit", query=query)["entries"])
