"""The outbox on the store's PostgreSQL database (several replicas): its own connection per
sink worker, claims with FOR UPDATE SKIP LOCKED, leases on the database's clock, and the
snapshot queries gaps.py uses to wait for ids another replica has not committed yet."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from .db import TABLES, Dialect, LedgerError, one_line

DIALECT = Dialect(
    ph="%s",
    now_ns="(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000000)::BIGINT",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    concurrent_writers=True,
)
# pg_advisory_xact_lock key serialising the outbox's CREATE TABLEs across replicas.
_TABLES_LOCK = 0x5354524F55544258  # "STROUTBX"


class PostgresDatabase:
    """A connection to the event store's PostgreSQL database (autocommit outside blocks)."""

    dialect = DIALECT

    def __init__(self, url: str, connect_timeout_s: float) -> None:
        try:
            self._conn = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=max(2, math.ceil(connect_timeout_s)),
                application_name="strata-outbox",
            )
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TABLES_LOCK,))
                for statement in TABLES:
                    self._conn.execute(statement)
        except psycopg.Error as exc:
            raise LedgerError(f"outbox cannot open the event store: {one_line(exc)}") from None

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows ([] when it returns none)."""
        try:
            cur = self._conn.execute(sql, tuple(args))
            return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            raise LedgerError(f"outbox query failed: {one_line(exc)}") from None

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; rows it changed."""
        try:
            return self._conn.execute(sql, tuple(args)).rowcount
        except psycopg.Error as exc:
            raise LedgerError(f"outbox write failed: {one_line(exc)}") from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction (row locks of FOR UPDATE last until it ends)."""
        try:
            with self._conn.transaction():
                yield
        except psycopg.Error as exc:
            raise LedgerError(f"outbox transaction failed: {one_line(exc)}") from None

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
