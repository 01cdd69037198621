"""The dashboard (docs/dashboard.md): a one-time link that logs a browser in as this key."""

from __future__ import annotations

from typing import TypedDict

from .client import get_client


class DashboardLoginLink(TypedDict):
    url: str
    expiresAt: str


def dashboard_login_link(*, url: str | None = None, api_key: str | None = None) -> DashboardLoginLink:
    """A link to the dashboard that logs a browser in as this API key: it works once, within a
    minute (what `warren ui --url` prints)."""
    return get_client(url, api_key).json("POST", "/v1/ui/login-links")
