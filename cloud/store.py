"""The event store: SQLite in WAL mode, written by one thread in batched transactions.

Request threads hand events to the writer and get a future that completes only after the
transaction holding the event has committed (fsync'd with synchronous=FULL), so an ack means
the event survives a crash. A crop id is stored once per edge: a resent crop gets the stored
event back.
"""

from __future__ import annotations

import base64
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2

from .gather import gather
from .metrics import CloudMetrics

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
)
SCHEMA_VERSION = len(MIGRATIONS)

_COLUMNS = (
    "event_id, edge_id, crop_id, camera_id, sequence, capture_ns, stored_ns, label, score, "
    "detection"
)
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


class StoreError(RuntimeError):
    """The store cannot open, migrate or write."""


class StoreBusyError(RuntimeError):
    """Too many events wait for the writer; try again later."""


@dataclass(frozen=True, slots=True)
class Stored:
    """The outcome of one write: the stored event, and whether it was there already."""

    event: analytics_pb2.Event
    duplicate: bool


@dataclass(frozen=True, slots=True)
class EventQuery:
    """A QueryEvents filter; empty strings and zero times mean no bound."""

    camera_id: str = ""
    label: str = ""
    start_ns: int = 0
    end_ns: int = 0


@dataclass(frozen=True, slots=True)
class PageKey:
    """Where a page ends: events are ordered by (time_ns, event_id)."""

    time_ns: int
    event_id: int

    def token(self) -> str:
        """The opaque page token for this position."""
        return base64.urlsafe_b64encode(f"v1:{self.time_ns}:{self.event_id}".encode()).decode()

    @classmethod
    def parse(cls, token: str) -> PageKey:
        """Decode a token; ValueError when it is not one of ours."""
        try:
            tag, t, e = base64.urlsafe_b64decode(token.encode()).decode().split(":")
            if tag != "v1":
                raise ValueError(tag)
            return cls(int(t), int(e))
        except Exception as exc:
            raise ValueError(f"malformed page_token {token!r}") from exc


@dataclass(slots=True)
class _Pending:
    event: analytics_pb2.Event
    future: Future[Stored]
    queued: float


def _signed(u: int) -> int:
    return u - _U64 if u > _I64_MAX else u


def _unsigned(i: int) -> int:
    return i + _U64 if i < 0 else i


def _event(row: tuple[Any, ...]) -> analytics_pb2.Event:
    (event_id, edge_id, crop_id, camera_id, seq, capture_ns, stored_ns, label, score, det) = row
    ev = analytics_pb2.Event(
        event_id=int(event_id),
        edge_id=str(edge_id),
        crop_id=str(crop_id),
        camera_id=str(camera_id),
        sequence=_unsigned(int(seq)),
        capture_ns=int(capture_ns),
        stored_ns=int(stored_ns),
        label=str(label),
        score=float(score),
    )
    if det:
        ev.edge_detection.ParseFromString(bytes(det))
    return ev


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to SCHEMA_VERSION; returns the version found before."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"event store has schema version {found}; this build knows up to "
                f"{SCHEMA_VERSION} (upgrade strata)"
            )
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


class EventStore:
    """SQLite events: a writer thread for inserts, a connection per reader thread."""

    def __init__(
        self,
        cfg: CloudStoreConfig,
        metrics: CloudMetrics,
        on_commit: Callable[[list[analytics_pb2.Event]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.path = cfg.path
        self.metrics = metrics
        self.on_commit = on_commit
        self._pending: queue.Queue[_Pending] = queue.Queue(maxsize=cfg.max_pending)
        self._stop = threading.Event()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._writer = _connect(self.path, cfg.synchronous)
            migrate(self._writer)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open event store {self.path}: {exc}") from exc
        self._thread = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def close(self) -> None:
        """Commit what is pending, then close every connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30.0)
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    # writes

    def submit(self, event: analytics_pb2.Event) -> Future[Stored]:
        """Queue an event; the future completes after it is committed. Raises StoreBusyError."""
        if self._stop.is_set():
            raise StoreBusyError("event store is closing")
        fut: Future[Stored] = Future()
        try:
            self._pending.put_nowait(_Pending(event, fut, time.monotonic()))
        except queue.Full:
            raise StoreBusyError(
                f"event store has {self.cfg.max_pending} events waiting; try again later"
            ) from None
        return fut

    def _take(self) -> list[_Pending]:
        try:
            first = self._pending.get(timeout=0.1)
        except queue.Empty:
            return []
        close_at = time.monotonic() + self.cfg.write_delay_ms / 1000.0
        return gather(self._pending, first, self.cfg.write_batch, close_at)

    def _write_loop(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                if self._stop.is_set() and self._pending.empty():
                    return
                continue
            self._write(batch)

    def _write(self, batch: list[_Pending]) -> None:
        conn = self._writer
        t0 = time.monotonic()
        results: list[Stored] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for p in batch:
                results.append(self._insert(conn, p.event))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.error("event store write of %d events failed: %s", len(batch), exc)
            err = StoreError(f"event store write failed: {exc}")
            for p in batch:
                p.future.set_exception(err)
            return
        done = time.monotonic()
        m = self.metrics
        m.store_commit_duration.observe(done - t0)
        m.store_batch_size.observe(len(batch))
        fresh = [r.event for r in results if not r.duplicate]
        m.events_stored.inc(len(fresh))
        for p, r in zip(batch, results, strict=True):
            m.store_latency.observe(done - p.queued)
            p.future.set_result(r)
        if fresh and self.on_commit is not None:
            self.on_commit(fresh)

    def _insert(self, conn: sqlite3.Connection, ev: analytics_pb2.Event) -> Stored:
        stored_ns = time.time_ns()
        time_ns = ev.capture_ns or stored_ns
        row = conn.execute(
            "INSERT INTO events (edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, "
            "stored_ns, label, score, detection) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (edge_id, crop_id) DO NOTHING RETURNING event_id",
            (
                ev.edge_id,
                ev.crop_id,
                ev.camera_id,
                _signed(ev.sequence),
                ev.capture_ns,
                time_ns,
                stored_ns,
                ev.label,
                ev.score,
                ev.edge_detection.SerializeToString() if ev.HasField("edge_detection") else b"",
            ),
        ).fetchone()
        if row is None:
            existing = conn.execute(
                f"SELECT {_COLUMNS} FROM events WHERE edge_id = ? AND crop_id = ?",
                (ev.edge_id, ev.crop_id),
            ).fetchone()
            return Stored(_event(existing), duplicate=True)
        out = analytics_pb2.Event()
        out.CopyFrom(ev)
        out.event_id = int(row[0])
        out.stored_ns = stored_ns
        return Stored(out, duplicate=False)

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

    def find(self, edge_id: str, crop_id: str) -> analytics_pb2.Event | None:
        """The stored event of a crop, if it was stored before."""
        row = (
            self._reader()
            .execute(
                f"SELECT {_COLUMNS} FROM events WHERE edge_id = ? AND crop_id = ?",
                (edge_id, crop_id),
            )
            .fetchone()
        )
        return None if row is None else _event(row)

    def query(
        self, q: EventQuery, after: PageKey | None, limit: int
    ) -> tuple[list[analytics_pb2.Event], PageKey | None]:
        """One page of events in (time, id) order, and the key of the next page (None: last)."""
        where = ["time_ns >= ?"]
        args: list[object] = [q.start_ns]
        if q.end_ns:
            where.append("time_ns < ?")
            args.append(q.end_ns)
        if q.camera_id:
            where.append("camera_id = ?")
            args.append(q.camera_id)
        if q.label:
            where.append("label = ?")
            args.append(q.label)
        if after is not None:
            where.append("(time_ns, event_id) > (?, ?)")
            args += [after.time_ns, after.event_id]
        args.append(limit + 1)
        rows = (
            self._reader()
            .execute(
                f"SELECT {_COLUMNS}, time_ns FROM events WHERE {' AND '.join(where)} "
                "ORDER BY time_ns, event_id LIMIT ?",
                args,
            )
            .fetchall()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        events = [_event(r[:-1]) for r in rows]
        key = PageKey(int(rows[-1][-1]), int(rows[-1][0])) if more else None
        return events, key

    def count(self) -> int:
        """Number of stored events."""
        row = self._reader().execute("SELECT COUNT(*) FROM events").fetchone()
        return int(row[0])
