"""Metered usage: what sandboxes cost in a window, billed for their allocated vCPUs and memory
for every second they run (hibernated time is free)."""

from __future__ import annotations

from datetime import datetime

from .client import get_client
from .models import UsageReport


def _instant(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def get_usage(
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    api_key_id: str | None = None,
    *,
    url: str | None = None,
    api_key: str | None = None,
) -> UsageReport:
    """Per sandbox, per API key and total usage and cost in the window (default: the 24
    hours before `until`, which defaults to now), at the daemon's prices. `api_key_id` keeps
    only the sandboxes created with that key id ("admin" for the admin key). A datetime
    without a timezone is the daemon's local time."""
    query = {"since": _instant(since), "until": _instant(until), "apiKey": api_key_id}
    return UsageReport.from_wire(get_client(url, api_key).json("GET", "/v1/usage", query=query))
