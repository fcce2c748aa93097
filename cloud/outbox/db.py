"""The outbox's view of the store's database: one connection per sink worker, its dialect,
and the outbox's own tables. The SQLite and PostgreSQL parts are sqlite.py and postgres.py;
`connect.open_database` picks one as the event store does (cloud.store.url set: PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


class LedgerError(RuntimeError):
    """The database cannot be reached, read or written (the worker reconnects)."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the back ends in the outbox's SQL."""

    ph: str
    # An SQL expression for the database's clock in ns (leases use one clock for all replicas).
    now_ns: str
    # Appended to the claim's SELECT: replicas skip rows another is claiming.
    skip_locked: str
    # Several writers may commit ids out of order (gaps.py waits for stragglers).
    concurrent_writers: bool


# The outbox's tables (both back ends; BIGINT is INTEGER affinity in SQLite).
# outbox_sinks: where a sink started (origin) and up to which id cameras were looked for.
# outbox_positions: per sink, source and camera: the last id delivered (or skipped) and who
# holds the lease on delivering the rest.
TABLES = (
    """CREATE TABLE IF NOT EXISTS outbox_sinks (
        sink TEXT NOT NULL,
        source TEXT NOT NULL,
        origin BIGINT NOT NULL,
        scanned BIGINT NOT NULL,
        PRIMARY KEY (sink, source)
    )""",
    """CREATE TABLE IF NOT EXISTS outbox_positions (
        sink TEXT NOT NULL,
        source TEXT NOT NULL,
        camera_id TEXT NOT NULL,
        position BIGINT NOT NULL,
        owner TEXT NOT NULL DEFAULT '',
        lease_until_ns BIGINT NOT NULL DEFAULT 0,
        delivered BIGINT NOT NULL DEFAULT 0,
        dropped BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (sink, source, camera_id)
    )""",
)


class Database(Protocol):
    """One connection; not shared between threads."""

    dialect: Dialect

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows ([] for none). Raises LedgerError."""

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; rows it changed. Raises LedgerError."""

    def transaction(self) -> AbstractContextManager[None]:
        """A transaction around the statements in the block (rolled back on error)."""

    def close(self) -> None:
        """Close the connection."""


def one_line(exc: BaseException) -> str:
    """A driver's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """`items` in slices of at most `size`."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
