"""The event store interface, and the batched writer every back end shares.

Request threads hand events to one writer thread and get a future that completes only after
the transaction holding the event has committed, so an ack means the event survives a crash.
A crop id is stored once per edge: a resent crop gets the stored event back. Track events
(events.proto) ride the same writer and transactions, stored once per idempotency key, in the
order they were submitted. Back ends
(`sqlite_store`, `postgres_store`) import this module and nothing imports them but the
registry in `store`, so the interface never depends on a back end.
"""

from __future__ import annotations

import abc
import base64
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, clips_pb2, events_pb2

from ..gather import gather
from ..metrics import CloudMetrics
from . import clip_rows, snapshot_rows, track_rows
from .clip_rows import ClipQuery, ClipRow, ClipWrite
from .snapshot_rows import Run, SnapshotQuery, SnapshotRow, StoredSnapshot
from .track_filter import TrackPageKey, TrackQuery

log = logging.getLogger(__name__)

# Every back end migrates its schema to this version (its MIGRATIONS has this many entries);
# a new version adds one migration to each back end.
SCHEMA_VERSION = 8

T = TypeVar("T")


class CommitListener(Protocol):
    """Who hears of committed events (the WatchEvents fan-out)."""

    def publish(self, events: list[analytics_pb2.Event]) -> None:
        """Events newly committed, in commit order."""

    def publish_tracks(self, events: list[events_pb2.StoredTrackEvent]) -> None:
        """Track events newly committed, in commit order (verdicts attached)."""

    def interrupt(self, reason: str) -> None:
        """Events may have been missed: whoever follows the feed must start over."""

    def pause(self, reason: str) -> None:
        """The feed is down (interrupts too) until resume()."""

    def resume(self) -> None:
        """The feed is back."""


class StoreError(RuntimeError):
    """The store cannot open, migrate, read or write."""


class StoreBusyError(RuntimeError):
    """Too many events wait for the writer; try again later."""


@dataclass(frozen=True, slots=True)
class Stored:
    """The outcome of one write: the stored event, and whether it was there already."""

    event: analytics_pb2.Event
    duplicate: bool


@dataclass(frozen=True, slots=True)
class StoredTrack:
    """The outcome of one track event write: as stored (the first copy when `duplicate`)."""

    stored: events_pb2.StoredTrackEvent
    duplicate: bool


# What the writer takes, and what it answers for each.
Writable = analytics_pb2.Event | events_pb2.TrackEvent | events_pb2.Snapshot
Outcome = Stored | StoredTrack | StoredSnapshot


@dataclass(frozen=True, slots=True)
class EventQuery:
    """A QueryEvents filter; empty strings and zero times mean no bound."""

    camera_id: str = ""
    label: str = ""
    start_ns: int = 0
    end_ns: int = 0
    # One event per (edge, camera, track): the latest in range, with track_events set.
    group_by_track: bool = False
    # One tracker id's crops; `track_uid` narrows them to that one track's life (ids are
    # reused after a tracker restart). 0 / "": any.
    track_id: int = 0
    track_uid: str = ""


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


def check_schema(found: int, where: str) -> None:
    """Refuse a schema newer than this build (a newer strata wrote it)."""
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"event store {where} has schema version {found}; this build knows up to "
            f"{SCHEMA_VERSION} (upgrade strata)"
        )


@dataclass(slots=True)
class _Pending:
    item: Writable
    # Future[Stored] for an Event, Future[StoredTrack] for a TrackEvent, Future[StoredSnapshot]
    # for a Snapshot.
    future: Future[Any]
    queued: float


class EventStore(abc.ABC):
    """Batched, acknowledged-after-commit writes; reads and the SQL are the back end's.

    `listener` hears of every event newly committed to the store: by this process, and for a
    store several replicas share, by any of them.
    """

    name: str  # where the events live, for logs (never a password)
    placeholder: str  # the SQL parameter marker of the back end's driver
    row_lock: str = ""  # what locks a selected row for the transaction (" FOR UPDATE")

    @classmethod
    @abc.abstractmethod
    def from_config(
        cls,
        cfg: CloudStoreConfig,
        url: str,
        metrics: CloudMetrics,
        listener: CommitListener | None,
    ) -> EventStore:
        """Open the store `cfg` names (`url`: the resolved PostgreSQL URL, or '')."""

    def __init__(
        self, cfg: CloudStoreConfig, metrics: CloudMetrics, listener: CommitListener | None
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.listener = listener
        self._pending: queue.Queue[_Pending] = queue.Queue(maxsize=cfg.max_pending)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)

    # back end

    @abc.abstractmethod
    def _commit(self, items: list[Writable]) -> list[Outcome]:
        """Insert events, track events and snapshots in one transaction, in order, and commit
        it; one outcome per item (Stored for an Event, StoredTrack for a TrackEvent,
        StoredSnapshot for a Snapshot). Raise StoreError on failure."""

    @abc.abstractmethod
    def _in_transaction(self, work: Callable[[Run], T]) -> T:
        """Run `work` in one write transaction on a connection of its own (not the writer's),
        commit, and return its result; raise StoreError on failure (rolled back)."""

    @abc.abstractmethod
    def _read(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        """Rows of one SELECT on a reader connection; raise StoreError on failure."""

    @abc.abstractmethod
    def _close_backend(self) -> None:
        """Close connections (the writer has stopped)."""

    @abc.abstractmethod
    def find(self, edge_id: str, crop_id: str) -> analytics_pb2.Event | None:
        """The stored event of a crop, if it was stored before. Raises StoreError."""

    @abc.abstractmethod
    def query(
        self, q: EventQuery, after: PageKey | None, limit: int
    ) -> tuple[list[analytics_pb2.Event], PageKey | None]:
        """One page of events in (time, id) order, and the key of the next page (None: last)."""

    @abc.abstractmethod
    def count(self) -> int:
        """Number of stored events."""

    def _committed(
        self, fresh: list[analytics_pb2.Event], tracks: list[events_pb2.StoredTrackEvent]
    ) -> None:
        """What this writer just committed; a shared store announces it its own way."""
        if self.listener is None:
            return
        if fresh:
            self.listener.publish(fresh)
        if tracks:
            try:
                with_verdicts = self.tracks_by_ids([t.stored_id for t in tracks])
            except StoreError as exc:
                self.metrics.event_feed_lost.inc()
                self.listener.interrupt(f"cannot read committed track events: {exc}")
                return
            self.listener.publish_tracks(with_verdicts)

    # track events (shared SQL: track_rows)

    def query_tracks(
        self, q: TrackQuery, after: TrackPageKey | None, limit: int
    ) -> tuple[list[events_pb2.StoredTrackEvent], TrackPageKey | None]:
        """One page of track events in (capture_ns, sequence, stored_id) order with their
        track's verdict, and the key of the next page (None: last). Raises StoreError."""
        sql, args = track_rows.query_sql(q, after, limit, self.placeholder)
        return track_rows.page(self._read(sql, args), limit)

    def tracks_by_ids(self, ids: list[int]) -> list[events_pb2.StoredTrackEvent]:
        """Stored track events by stored id, in id order, verdicts attached."""
        out: list[events_pb2.StoredTrackEvent] = []
        for i in range(0, len(ids), 500):  # bounded parameter lists
            part = ids[i : i + 500]
            rows = self._read(track_rows.by_ids_sql(self.placeholder, len(part)), part)
            out += [track_rows.stored_from_row(r) for r in rows]
        return out

    def count_tracks(self) -> int:
        """Number of stored track events."""
        return int(self._read("SELECT COUNT(*) FROM track_events", ())[0][0])

    # snapshots (shared SQL: snapshot_rows)

    def find_snapshot(self, q: SnapshotQuery) -> SnapshotRow | None:
        """The stored snapshot the query names (None: none stored). Raises StoreError,
        SnapshotLookupError (names no single track), LookupError (unknown event or track)."""
        return snapshot_rows.find(q, self._read, self.placeholder)

    def count_snapshots(self) -> int:
        """Number of stored snapshots."""
        return int(self._read("SELECT COUNT(*) FROM snapshots", ())[0][0])

    # clips (shared SQL: clip_rows)

    def append_clip(self, chunk: clips_pb2.ClipChunk) -> ClipWrite:
        """Store a checked clip chunk (clip_checks) in its own transaction beside the writer,
        committed before this returns. Raises StoreError."""
        return self._in_transaction(
            lambda run: clip_rows.append(
                run, chunk, time.time_ns(), self.placeholder, self.row_lock
            )
        )

    def find_clip(self, q: ClipQuery) -> ClipRow | None:
        """The stored clip the query names (None: none). Raises StoreError, ClipLookupError
        (names no single clip or track)."""
        return clip_rows.find(q, self._read, self.placeholder)

    def clip_pieces(self, clip_id: str, offset: int, rows: int) -> list[tuple[int, bytes]]:
        """Up to `rows` stored chunks of a clip that end past `offset`: (their offset, bytes)
        in order. Raises StoreError."""
        got = self._read(clip_rows.pieces_sql(self.placeholder), (clip_id, offset, rows))
        return [(int(r[0]), bytes(r[1])) for r in got]

    def count_clips(self) -> int:
        """Number of stored clips (final or not)."""
        return int(self._read("SELECT COUNT(*) FROM clips", ())[0][0])

    def select(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        """Rows of one SELECT in the back end's placeholder style (retention). Raises
        StoreError."""
        return self._read(sql, args)

    def transaction(self, work: Callable[[Run], T]) -> T:
        """Run `work(execute)` in one write transaction beside the writer (retention)."""
        return self._in_transaction(work)

    # lifecycle

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def close(self) -> None:
        """Commit what is pending, then close every connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30.0)
        self._close_backend()

    # writes

    def submit(self, event: analytics_pb2.Event) -> Future[Stored]:
        """Queue an event; the future completes after it is committed. Raises StoreBusyError."""
        fut: Future[Stored] = Future()
        self._queue(event, fut)
        return fut

    def submit_track(self, event: events_pb2.TrackEvent) -> Future[StoredTrack]:
        """Queue a checked track event (track_checks); the future completes after it is
        committed. Events submitted in order are stored in that order. Raises StoreBusyError."""
        fut: Future[StoredTrack] = Future()
        self._queue(event, fut)
        return fut

    def submit_snapshot(self, snap: events_pb2.Snapshot) -> Future[StoredSnapshot]:
        """Queue a checked snapshot (snapshot_checks); the future completes after it is
        committed. Submitted before an event, it commits no later than the event does.
        Raises StoreBusyError."""
        fut: Future[StoredSnapshot] = Future()
        self._queue(snap, fut)
        return fut

    def _queue(self, item: Writable, fut: Future[Any]) -> None:
        if self._stop.is_set():
            raise StoreBusyError("event store is closing")
        try:
            self._pending.put_nowait(_Pending(item, fut, time.monotonic()))
        except queue.Full:
            raise StoreBusyError(
                f"event store has {self.cfg.max_pending} events waiting; try again later"
            ) from None

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
        t0 = time.monotonic()
        try:
            results = self._commit([p.item for p in batch])
        except Exception as exc:
            log.error("event store write of %d events failed: %s", len(batch), exc)
            err = exc if isinstance(exc, StoreError) else StoreError(f"write failed: {exc}")
            for p in batch:
                p.future.set_exception(err)
            return
        done = time.monotonic()
        m = self.metrics
        m.store_commit_duration.observe(done - t0)
        m.store_batch_size.observe(len(batch))
        fresh = [r.event for r in results if isinstance(r, Stored) and not r.duplicate]
        tracks = [r.stored for r in results if isinstance(r, StoredTrack) and not r.duplicate]
        m.events_stored.inc(len(fresh))
        for p, r in zip(batch, results, strict=True):
            m.store_latency.observe(done - p.queued)
            p.future.set_result(r)
        if fresh or tracks:
            self._committed(fresh, tracks)
