"""Databases (docs/databases.md): PostgreSQL in a sandbox, reached from this host through a
forward on 127.0.0.1. Behaves as the TS SDK's `Database`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import List
from urllib.parse import quote

from .client import HttpClient, get_client
from .models import Model


@dataclass
class DatabaseInfo(Model):
    """What the daemon shows of a database; never its password (only `Database.url()` has it)."""

    name: str = ""
    database: str = ""
    state: str = ""
    created_at: str = ""
    sandbox_id: str | None = None
    host_port: int | None = None
    parent: str | None = None
    branched_at: str | None = None
    restored_to: str | None = None
    retain_seconds: int = 0
    restorable: dict | None = None


class Database:
    """A database. Make one with `Database.create`, find one with `Database.get`.

    Example::

        db = Database.create("app")
        url = db.url()              # postgres://postgres:...@127.0.0.1:PORT/app
        attempt = db.branch("app_try1")
    """

    def __init__(self, info: DatabaseInfo, client: HttpClient) -> None:
        self.info = info
        self._client = client

    @staticmethod
    def create(
        name: str, *, from_snapshot: str | None = None, retain_seconds: int | None = None, url: str | None = None, api_key: str | None = None
    ) -> "Database":
        """Creates a database: a sandbox running PostgreSQL with a database `name` in it.
        `retain_seconds`: how long its WAL archive keeps history (default 7 days)."""
        client = get_client(url, api_key)
        body: dict[str, object] = {"name": name}
        if from_snapshot:
            body["fromSnapshot"] = from_snapshot
        if retain_seconds:
            body["retainSeconds"] = retain_seconds
        return Database(DatabaseInfo.from_wire(client.json("POST", "/v1/databases", json=body)), client)

    @staticmethod
    def get(name: str, *, url: str | None = None, api_key: str | None = None) -> "Database":
        """The database of this name (NotFoundError if there is none)."""
        client = get_client(url, api_key)
        return Database(DatabaseInfo.from_wire(client.json("GET", f"/v1/databases/{quote(name, safe='')}")), client)

    @staticmethod
    def list(*, url: str | None = None, api_key: str | None = None) -> List[DatabaseInfo]:
        return [DatabaseInfo.from_wire(d) for d in get_client(url, api_key).json("GET", "/v1/databases")["databases"]]

    @property
    def name(self) -> str:
        return self.info.name

    def refresh(self) -> DatabaseInfo:
        self.info = DatabaseInfo.from_wire(self._client.json("GET", self._route()))
        return self.info

    def branch(self, new_name: str) -> "Database":
        """A live, writable copy of this database at this instant, named `new_name`."""
        return Database(DatabaseInfo.from_wire(self._client.json("POST", f"{self._route()}/branches", json={"name": new_name})), self._client)

    def restore(self, new_name: str, to: datetime | str | int) -> "Database":
        """A new database `new_name` holding this one's data as it was at `to` (an aware
        datetime, an ISO 8601 string with a zone, or epoch milliseconds), replayed from its WAL
        archive; times outside `info.restorable` are refused."""
        if isinstance(to, datetime):
            if to.tzinfo is None:
                raise ValueError("restore time must carry a time zone (datetime.now(timezone.utc))")
            to = to.isoformat()
        body = {"name": new_name, "to": to}
        return Database(DatabaseInfo.from_wire(self._client.json("POST", f"{self._route()}/restore", json=body)), self._client)

    def url(self) -> str:
        """`postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE`: holds the password, keep it out of logs."""
        return self._client.json("GET", f"{self._route()}/url")["url"]

    def delete(self) -> None:
        """Kills its sandbox and forgets it; its branches stay."""
        self._client.json("DELETE", self._route())

    def _route(self) -> str:
        return f"/v1/databases/{quote(self.info.name, safe='')}"
