"""The SQLite event store (one box, the default): WAL mode, one writer connection that commits
batches with synchronous=FULL (an ack means fsync'd), one read-only connection per reader
thread."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, events_pb2

from ..metrics import CloudMetrics
from . import appearance_rows, clip_rows, snapshot_rows, track_rows
from .event_rows import (
    COLUMNS,
    INSERT_COLUMNS,
    MIGRATION_7,
    event_from_row,
    insert_row,
    page,
    placeholders,
    query_sql,
    stored_event,
)
from .event_store import (
    SCHEMA_VERSION,
    CommitListener,
    EventQuery,
    EventStore,
    Outcome,
    PageKey,
    Stored,
    StoredTrack,
    StoreError,
    T,
    Writable,
    check_schema,
)
from .snapshot_rows import Run

log = logging.getLogger(__name__)

# Each entry migrates the schema from version i to i+1; append, never edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE events (
            event_id INTEGER PRIMARY KEY AUTOINCREMENT,
            edge_id TEXT NOT NULL,
            crop_id TEXT NOT NULL,
            camera_id TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            capture_ns INTEGER NOT NULL,
            time_ns INTEGER NOT NULL,
            stored_ns INTEGER NOT NULL,
            label TEXT NOT NULL,
            score REAL NOT NULL,
            detection BLOB NOT NULL,
            UNIQUE (edge_id, crop_id)
        )""",
        "CREATE INDEX events_camera_time ON events (camera_id, time_ns, event_id)",
        "CREATE INDEX events_time ON events (time_ns, event_id)",
        "CREATE INDEX events_label_time ON events (label, time_ns, event_id)",
    ),
    # 2: the edge tracker's id, so events group by tracked object (0: not tracked).
    (
        "ALTER TABLE events ADD COLUMN track_id INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX events_track ON events (edge_id, camera_id, track_id, time_ns)",
    ),
    # 3: the repository version of the classifier that labelled the event; NULL for events
    # stored before (their version is not known).
    ("ALTER TABLE events ADD COLUMN model_version INTEGER",),
    # 4: track lifecycle and rule events (events.proto), stored once per idempotency key,
    # with the columns queries filter on; the tracks view joins the cloud's verdict.
    (
        """CREATE TABLE track_events (
            stored_id INTEGER PRIMARY KEY AUTOINCREMENT,
            idempotency_key TEXT NOT NULL UNIQUE,
            camera_id TEXT NOT NULL,
            edge_id TEXT NOT NULL,
            track_id INTEGER NOT NULL,
            track_uid TEXT NOT NULL,
            first_seen_ns INTEGER NOT NULL,
            type INTEGER NOT NULL,
            sequence INTEGER NOT NULL,
            track_sequence INTEGER NOT NULL,
            capture_ns INTEGER NOT NULL,
            stored_ns INTEGER NOT NULL,
            label TEXT NOT NULL,
            zone TEXT NOT NULL,
            line TEXT NOT NULL,
            rule TEXT NOT NULL,
            event BLOB NOT NULL
        )""",
        *track_rows.INDEXES,
        track_rows.TRACKS_VIEW,
    ),
    # 5: track snapshots (JPEGs in the row), one per track and kind.
    (
        snapshot_rows.table_sql("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER"),
        *snapshot_rows.INDEXES,
    ),
    # 6: event clips from devices: the clip, its bytes in chunks (in the database, so every
    # replica serves every clip) and the tracks it shows.
    (
        *clip_rows.table_sql("BLOB", "INTEGER"),
        *clip_rows.INDEXES,
    ),
    # 7: the cloud's second opinion (verdict, model, support) and the detector's label, which
    # label filters match (the classifier's label stays as its evidence).
    MIGRATION_7,
    # 8: each track's appearance embedding and cross-camera identity (issue 42).
    (
        appearance_rows.table_sql("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER"),
        *appearance_rows.INDEXES,
    ),
)

_INSERT = (
    f"INSERT INTO events ({INSERT_COLUMNS}) VALUES ({placeholders('?')}) "
    "ON CONFLICT (edge_id, crop_id) DO NOTHING RETURNING event_id"
)
_FIND = f"SELECT {COLUMNS} FROM events WHERE edge_id = ? AND crop_id = ?"
_INSERT_TRACK = track_rows.insert_sql("?")
_FIND_TRACK = track_rows.find_sql("?")


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def migrate(conn: sqlite3.Connection, where: str = "") -> int:
    """Bring the schema to SCHEMA_VERSION in one transaction; returns the version found."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        found = int(row[0]) if row else 0
        check_schema(found, where)
        for version in range(found, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        else:
            conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if found < SCHEMA_VERSION:
        log.info("event store migrated from schema %d to %d", found, SCHEMA_VERSION)
    return found


class SQLiteStore(EventStore):
    """SQLite events: a writer thread for inserts, a connection per reader thread."""

    placeholder = "?"

    def __init__(
        self, cfg: CloudStoreConfig, metrics: CloudMetrics, listener: CommitListener | None = None
    ) -> None:
        super().__init__(cfg, metrics, listener)
        self.path = cfg.path
        self.name = cfg.path
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._writer = _connect(self.path, cfg.synchronous)
            migrate(self._writer, self.path)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open event store {self.path}: {exc}") from exc

    @classmethod
    def from_config(
        cls,
        cfg: CloudStoreConfig,
        url: str,
        metrics: CloudMetrics,
        listener: CommitListener | None,
    ) -> SQLiteStore:
        """The SQLite file at cfg.path (`url` is empty: no PostgreSQL was named)."""
        return cls(cfg, metrics, listener)

    def _close_backend(self) -> None:
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def _commit(self, items: list[Writable]) -> list[Outcome]:
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            results = [self._insert_one(conn, it) for it in items]
            conn.execute("COMMIT")
        except (sqlite3.Error, RuntimeError) as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"event store write failed: {exc}") from exc
        return results

    def _insert_one(self, conn: sqlite3.Connection, it: Writable) -> Outcome:
        if isinstance(it, analytics_pb2.Event):
            return self._insert(conn, it)
        if isinstance(it, events_pb2.TrackEvent):
            return self._insert_track(conn, it)
        return snapshot_rows.write(conn.execute, it, "?")

    def _in_transaction(self, work: Callable[[Run], T]) -> T:
        try:
            conn = _connect(self.path, self.cfg.synchronous)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open event store {self.path}: {exc}") from exc
        try:
            conn.execute("BEGIN IMMEDIATE")
            out = work(conn.execute)
            conn.execute("COMMIT")
            return out
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"event store write failed: {exc}") from exc
        finally:
            conn.close()

    @staticmethod
    def _insert(conn: sqlite3.Connection, ev: analytics_pb2.Event) -> Stored:
        values = insert_row(ev)
        row = conn.execute(_INSERT, values).fetchone()
        if row is None:
            existing = conn.execute(_FIND, (ev.edge_id, ev.crop_id)).fetchone()
            return Stored(event_from_row(existing), duplicate=True)
        return Stored(stored_event(ev, int(row[0]), values), duplicate=False)

    @staticmethod
    def _insert_track(conn: sqlite3.Connection, ev: events_pb2.TrackEvent) -> StoredTrack:
        values = track_rows.insert_row(ev)
        row = conn.execute(_INSERT_TRACK, values).fetchone()
        if row is None:
            existing = conn.execute(_FIND_TRACK, (ev.idempotency_key,)).fetchone()
            return StoredTrack(track_rows.stored_from_row(existing), duplicate=True)
        appearance_rows.write(conn.execute, ev, "?")
        return StoredTrack(track_rows.stored_from_insert(ev, int(row[0]), values), False)

    # reads

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path, self.cfg.synchronous)
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _read(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        try:
            return self._reader().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"event store read failed: {exc}") from exc

    def find(self, edge_id: str, crop_id: str) -> analytics_pb2.Event | None:
        """The stored event of a crop, if it was stored before."""
        rows = self._read(_FIND, (edge_id, crop_id))
        return event_from_row(rows[0]) if rows else None

    def query(
        self, q: EventQuery, after: PageKey | None, limit: int
    ) -> tuple[list[analytics_pb2.Event], PageKey | None]:
        """One page of events in (time, id) order, and the key of the next page (None: last)."""
        sql, args = query_sql(q, after, limit, "?")
        return page(self._read(sql, args), limit, q.group_by_track)

    def count(self) -> int:
        """Number of stored events."""
        row = self._reader().execute("SELECT COUNT(*) FROM events").fetchone()
        return int(row[0])
