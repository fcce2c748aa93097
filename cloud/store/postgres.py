"""The PostgreSQL event store: several cloud replicas on one database (psycopg 3, a pool).

Same contract as SQLite: the writer commits a batch in one transaction and acks after the
commit returns (synchronous_commit: durable on the server); a crop is stored once per edge
across replicas by the unique (edge_id, crop_id) constraint (INSERT ... ON CONFLICT DO
NOTHING; a racing replica waits for the other's commit, then reads its row). Migrations run
in one transaction under an advisory lock, so replicas starting together migrate once and a
failure leaves nothing half-written. WatchEvents hears every replica's commits through
LISTEN/NOTIFY (postgres_feed). Track events go the same way: stored once per idempotency
key across replicas (the unique key), announced on their own channel.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool
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
from .postgres_feed import CHANNEL, TRACK_CHANNEL, EventFeed, payloads
from .snapshot_rows import Run

log = logging.getLogger(__name__)

# Each entry migrates the schema from version i to i+1; append, never edit. Keep the version
# numbers in step with sqlite_store.MIGRATIONS.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE events (
            event_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            edge_id TEXT NOT NULL,
            crop_id TEXT NOT NULL,
            camera_id TEXT NOT NULL,
            sequence BIGINT NOT NULL,
            capture_ns BIGINT NOT NULL,
            time_ns BIGINT NOT NULL,
            stored_ns BIGINT NOT NULL,
            label TEXT NOT NULL,
            score DOUBLE PRECISION NOT NULL,
            detection BYTEA NOT NULL,
            CONSTRAINT events_edge_crop UNIQUE (edge_id, crop_id)
        )""",
        "CREATE INDEX events_camera_time ON events (camera_id, time_ns, event_id)",
        "CREATE INDEX events_time ON events (time_ns, event_id)",
        "CREATE INDEX events_label_time ON events (label, time_ns, event_id)",
    ),
    # 2: the edge tracker's id, so events group by tracked object (0: not tracked).
    (
        "ALTER TABLE events ADD COLUMN track_id BIGINT NOT NULL DEFAULT 0",
        "CREATE INDEX events_track ON events (edge_id, camera_id, track_id, time_ns)",
    ),
    # 3: the repository version of the classifier that labelled the event; NULL for events
    # stored before (their version is not known).
    ("ALTER TABLE events ADD COLUMN model_version BIGINT",),
    # 4: track lifecycle and rule events (events.proto), stored once per idempotency key,
    # with the columns queries filter on; the tracks view joins the cloud's verdict.
    (
        """CREATE TABLE track_events (
            stored_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            idempotency_key TEXT NOT NULL,
            camera_id TEXT NOT NULL,
            edge_id TEXT NOT NULL,
            track_id BIGINT NOT NULL,
            track_uid TEXT NOT NULL,
            first_seen_ns BIGINT NOT NULL,
            type INTEGER NOT NULL,
            sequence BIGINT NOT NULL,
            track_sequence BIGINT NOT NULL,
            capture_ns BIGINT NOT NULL,
            stored_ns BIGINT NOT NULL,
            label TEXT NOT NULL,
            zone TEXT NOT NULL,
            line TEXT NOT NULL,
            rule TEXT NOT NULL,
            event BYTEA NOT NULL,
            CONSTRAINT track_events_key UNIQUE (idempotency_key)
        )""",
        *track_rows.INDEXES,
        track_rows.TRACKS_VIEW,
    ),
    # 5: track snapshots (JPEGs in the row, so every replica serves every one), one per
    # track and kind.
    (
        snapshot_rows.table_sql(
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BYTEA", "BIGINT"
        ),
        *snapshot_rows.INDEXES,
    ),
    # 6: event clips from devices: the clip, its bytes in chunks (in the database, so every
    # replica serves every clip) and the tracks it shows.
    (
        *clip_rows.table_sql("BYTEA", "BIGINT"),
        *clip_rows.INDEXES,
    ),
    # 7: the cloud's second opinion (verdict, model, support) and the detector's label, which
    # label filters match (the classifier's label stays as its evidence).
    MIGRATION_7,
    # 8: each track's appearance embedding and cross-camera identity (issue 42).
    (
        appearance_rows.table_sql(
            "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BYTEA", "BIGINT"
        ),
        *appearance_rows.INDEXES,
    ),
)
# pg_advisory_xact_lock key that serialises migrations of replicas starting together.
_MIGRATION_LOCK = 0x5354524154414556  # "STRATAEV"

_INSERT = (
    f"INSERT INTO events ({INSERT_COLUMNS}) VALUES ({placeholders('%s')}) "
    "ON CONFLICT (edge_id, crop_id) DO NOTHING RETURNING event_id"
)
_FIND = f"SELECT {COLUMNS} FROM events WHERE edge_id = %s AND crop_id = %s"
_BY_IDS = f"SELECT {COLUMNS} FROM events WHERE event_id = ANY(%s) ORDER BY event_id"
_INSERT_TRACK = track_rows.insert_sql("%s")
_FIND_TRACK = track_rows.find_sql("%s")


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparsable postgresql URL>"


def _why(exc: BaseException) -> str:
    # libpq's messages span lines ("connection to server ... failed: ..."); keep them on one.
    return " ".join(str(exc).split()) or type(exc).__name__


def migrate(conn: psycopg.Connection[Any], where: str = "") -> int:
    """Bring the schema to SCHEMA_VERSION in one transaction; returns the version found."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        found = int(row[0]) if row else 0
        check_schema(found, where)
        for version in range(found, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
        else:
            conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
    if found < SCHEMA_VERSION:
        log.info("event store migrated from schema %d to %d", found, SCHEMA_VERSION)
    return found


def _warn_if_not_durable(conn: psycopg.Connection[Any], where: str) -> None:
    """An ack promises the event survives a crash; say so when the server cannot keep that."""
    for setting, unsafe in (("synchronous_commit", "off"), ("fsync", "off")):
        row = conn.execute(f"SHOW {setting}").fetchone()
        if row is not None and str(row[0]) == unsafe:
            log.warning(
                "event store %s has %s=%s: a crash of the database can lose acked events",
                where,
                setting,
                unsafe,
            )


class PostgresStore(EventStore):
    """Events in PostgreSQL: the shared batched writer, pooled readers, a LISTEN feed."""

    placeholder = "%s"
    row_lock = " FOR UPDATE"

    def __init__(
        self,
        cfg: CloudStoreConfig,
        url: str,
        metrics: CloudMetrics,
        listener: CommitListener | None = None,
    ) -> None:
        super().__init__(cfg, metrics, listener)
        self.name = redact(url)
        # libpq takes whole seconds, at least 2.
        timeout = max(2, math.ceil(cfg.connect_timeout_s))
        opts: dict[str, Any] = {"connect_timeout": timeout, "application_name": "strata-cloud"}
        try:
            with psycopg.connect(url, **opts) as conn:
                migrate(conn, self.name)
                _warn_if_not_durable(conn, self.name)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open event store {self.name}: {_why(exc)}") from None
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=2,
            max_size=cfg.pool_size,
            open=False,
            kwargs={**opts, "autocommit": True},
            # A connection broken by a server restart is replaced, not handed out.
            check=ConnectionPool.check_connection,
            timeout=cfg.connect_timeout_s,
            name="strata-events",
        )
        self._feed: EventFeed | None = None
        try:
            self._pool.open(wait=True, timeout=cfg.connect_timeout_s)
            if listener is not None:
                handlers: dict[str, Callable[[list[int]], None]] = {
                    CHANNEL: self._announced,
                    TRACK_CHANNEL: self._announced_tracks,
                }
                self._feed = EventFeed(url, timeout, handlers, self._lost, listener.resume)
                self._feed.start()
        except psycopg.Error as exc:
            self._pool.close()
            raise StoreError(f"cannot open event store {self.name}: {_why(exc)}") from None

    @classmethod
    def from_config(
        cls,
        cfg: CloudStoreConfig,
        url: str,
        metrics: CloudMetrics,
        listener: CommitListener | None,
    ) -> PostgresStore:
        """The PostgreSQL database at `url`."""
        return cls(cfg, url, metrics, listener)

    def _close_backend(self) -> None:
        if self._feed is not None:
            self._feed.close()
        self._pool.close()

    # writes

    def _commit(self, items: list[Writable]) -> list[Outcome]:
        events = [it for it in items if isinstance(it, analytics_pb2.Event)]
        tracks = [it for it in items if isinstance(it, events_pb2.TrackEvent)]
        snaps = [it for it in items if isinstance(it, events_pb2.Snapshot)]
        try:
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                # Snapshots first: an event naming one commits with or after it.
                stored_snaps = iter([snapshot_rows.write(cur.execute, s, "%s") for s in snaps])
                stored = iter(self._insert_events(cur, events))
                # Track events in submission order (the order of their stored ids).
                stored_tracks = iter(self._insert_tracks(cur, tracks))
        except (psycopg.Error, RuntimeError) as exc:
            raise StoreError(f"event store write failed: {_why(exc)}") from None
        out: list[Outcome] = []
        for it in items:
            if isinstance(it, analytics_pb2.Event):
                out.append(next(stored))
            elif isinstance(it, events_pb2.TrackEvent):
                out.append(next(stored_tracks))
            else:
                out.append(next(stored_snaps))
        return out

    def _in_transaction(self, work: Callable[[Run], T]) -> T:
        try:
            with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                return work(cur.execute)
        except psycopg.Error as exc:
            raise StoreError(f"event store write failed: {_why(exc)}") from None

    @staticmethod
    def _inserted(cur: psycopg.Cursor[Any], sql: str, rows: list[tuple[Any, ...]]) -> list[Any]:
        """One round trip for the rows (pipeline mode): each new row's id, None if it was there."""
        if not rows:
            return []
        cur.executemany(sql, rows, returning=True)
        ids: list[tuple[Any, ...] | None] = []
        while True:
            ids.append(cur.fetchone())
            if not cur.nextset():
                break
        return [None if got is None else int(got[0]) for got in ids]

    def _insert_events(
        self, cur: psycopg.Cursor[Any], events: list[analytics_pb2.Event]
    ) -> list[Stored]:
        rows = [insert_row(ev) for ev in events]
        results: list[Stored] = []
        fresh: list[int] = []
        for ev, row, got in zip(events, rows, self._inserted(cur, _INSERT, rows), strict=True):
            if got is None:
                existing = cur.execute(_FIND, (ev.edge_id, ev.crop_id)).fetchone()
                assert existing is not None  # the conflicting row is committed or ours
                results.append(Stored(event_from_row(existing), duplicate=True))
            else:
                fresh.append(got)
                results.append(Stored(stored_event(ev, got, row), False))
        # Delivered to every listening replica when, and only if, this commits.
        for payload in payloads(fresh):
            cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
        return results

    def _insert_tracks(
        self, cur: psycopg.Cursor[Any], tracks: list[events_pb2.TrackEvent]
    ) -> list[StoredTrack]:
        rows = [track_rows.insert_row(ev) for ev in tracks]
        results: list[StoredTrack] = []
        fresh: list[int] = []
        inserted = self._inserted(cur, _INSERT_TRACK, rows)
        for ev, row, got in zip(tracks, rows, inserted, strict=True):
            if got is None:
                existing = cur.execute(_FIND_TRACK, (ev.idempotency_key,)).fetchone()
                assert existing is not None  # the conflicting row is committed or ours
                results.append(StoredTrack(track_rows.stored_from_row(existing), True))
            else:
                fresh.append(got)
                appearance_rows.write(cur.execute, ev, "%s")
                results.append(StoredTrack(track_rows.stored_from_insert(ev, got, row), False))
        for payload in payloads(fresh):
            cur.execute("SELECT pg_notify(%s, %s)", (TRACK_CHANNEL, payload))
        return results

    def _committed(
        self, fresh: list[analytics_pb2.Event], tracks: list[events_pb2.StoredTrackEvent]
    ) -> None:
        # Watchers hear this replica's events through the feed, like every other replica's.
        pass

    # the feed

    def _announced(self, ids: list[int]) -> None:
        assert self.listener is not None
        try:
            rows = self._rows(_BY_IDS, (ids,))
        except StoreError as exc:
            self.metrics.event_feed_lost.inc()
            self.listener.interrupt(f"cannot read announced events: {exc}")
            return
        self.listener.publish([event_from_row(r) for r in rows])

    def _announced_tracks(self, ids: list[int]) -> None:
        assert self.listener is not None
        try:
            stored = self.tracks_by_ids(ids)
        except StoreError as exc:
            self.metrics.event_feed_lost.inc()
            self.listener.interrupt(f"cannot read announced track events: {exc}")
            return
        self.listener.publish_tracks(stored)

    def _lost(self, reason: str) -> None:
        assert self.listener is not None
        self.metrics.event_feed_lost.inc()
        self.listener.pause(reason)

    # reads

    def _read(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        return self._rows(sql, args)

    def _rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        try:
            with self._pool.connection() as conn:
                return conn.execute(sql, args).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"event store read failed: {_why(exc)}") from None

    def find(self, edge_id: str, crop_id: str) -> analytics_pb2.Event | None:
        """The stored event of a crop, if any replica stored it before."""
        rows = self._rows(_FIND, (edge_id, crop_id))
        return event_from_row(rows[0]) if rows else None

    def query(
        self, q: EventQuery, after: PageKey | None, limit: int
    ) -> tuple[list[analytics_pb2.Event], PageKey | None]:
        """One page of events in (time, id) order, and the key of the next page (None: last)."""
        sql, args = query_sql(q, after, limit, "%s")
        return page(self._rows(sql, args), limit, q.group_by_track)

    def count(self) -> int:
        """Number of stored events."""
        return int(self._rows("SELECT COUNT(*) FROM events", ())[0][0])
