"""The outbox on the store's SQLite file: its own connection (WAL lets it read beside the
store's writer), positions written with synchronous=NORMAL (a power cut can only make the
outbox send again what the receiver's dedupe drops)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .db import TABLES, Dialect, LedgerError

DIALECT = Dialect(
    ph="?",
    now_ns="CAST((julianday('now') - 2440587.5) * 86400000000000.0 AS INTEGER)",
    skip_locked="",
    # One writer thread commits in id order.
    concurrent_writers=False,
)


class SQLiteDatabase:
    """A connection to the event store's SQLite file."""

    dialect = DIALECT

    def __init__(self, path: str) -> None:
        try:
            self._conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self.transaction():
                for statement in TABLES:
                    self._conn.execute(statement)
        except sqlite3.Error as exc:
            raise LedgerError(f"outbox cannot open {path}: {exc}") from None

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows."""
        try:
            return self._conn.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise LedgerError(f"outbox query failed: {exc}") from None

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; rows it changed."""
        try:
            return self._conn.execute(sql, tuple(args)).rowcount
        except sqlite3.Error as exc:
            raise LedgerError(f"outbox write failed: {exc}") from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT: the write lock up front, so a claim is atomic."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerError(f"outbox transaction failed: {exc}") from None
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise LedgerError(f"outbox transaction failed: {exc}") from None
            raise

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
