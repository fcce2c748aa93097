"""The uplink's on-disk queue: two FIFOs (crops, track events) in one SQLite file, bounded
in bytes together.

Crops and events the memory buffer cannot hold while the cloud is away wait here, in order,
and survive a restart of the edge. Rows are keyed by a sequence number per table; pushing to
the front (items that came back unacked) takes numbers below the smallest, so each table
stays oldest first. Beyond the byte bound the oldest crops go first: events are small and
each one is promised (an `end` event is the only one of its track), so an event is dropped
only when no crop is left to drop, and crops never push out an event. The caller counts
what went. WAL with synchronous=NORMAL: a killed process loses nothing; a power cut may
lose the last commits.
"""

from __future__ import annotations

import fcntl
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError, Message
from strata.shared.contracts import analytics_pb2, events_pb2

log = logging.getLogger(__name__)

_TABLES = ("crops", "events")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {} "
    "(seq INTEGER PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)"
)


class SpoolError(RuntimeError):
    """The spool file cannot be opened or is not a crop spool."""


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What a push dropped to stay within the byte bound (oldest first, crops before events)."""

    crops: int = 0
    events: int = 0


@dataclass(slots=True)
class _Fifo:
    """One table's bookkeeping: its row count, bytes and the head and tail sequence."""

    table: str
    count: int = 0
    bytes: int = 0
    head: int = 0
    tail: int = -1


class CropSpool:
    """FIFOs of crops and of track events on disk; push and pop are thread-safe, each one
    transaction."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # One process per spool: two would pop each other's crops and miscount.
            self._lock_file = open(f"{path}.lock", "a+b")  # noqa: SIM115 - held until close
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock_file.close()
                raise SpoolError(
                    f"the uplink spool {path} is in use by another edge process; give each "
                    "its own edge.uplink.spool_path"
                ) from None
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._fifos: dict[str, _Fifo] = {}
            for table in _TABLES:
                # A spool written before events rode the uplink gets the events table here.
                self._conn.execute(_SCHEMA.format(table))
                row = self._conn.execute(
                    f"SELECT count(*), coalesce(sum(size), 0), min(seq), max(seq) FROM {table}"
                ).fetchone()
                self._fifos[table] = _Fifo(
                    table,
                    int(row[0]),
                    int(row[1]),
                    int(row[2]) if row[2] is not None else 0,
                    int(row[3]) if row[3] is not None else -1,
                )
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"cannot open the uplink spool {path}: {exc}") from exc
        self._lock = threading.Lock()
        self._crops, self._events = self._fifos["crops"], self._fifos["events"]
        if self._crops.count or self._events.count:
            log.info(
                "uplink spool %s holds %d crops and %d track events from before; sending "
                "them first",
                path,
                self._crops.count,
                self._events.count,
            )

    def __len__(self) -> int:
        """Crops waiting."""
        with self._lock:
            return self._crops.count

    @property
    def events(self) -> int:
        """Track events waiting."""
        with self._lock:
            return self._events.count

    @property
    def bytes(self) -> int:
        """Bytes of every row, crops and events: what the bound applies to."""
        with self._lock:
            return self._crops.bytes + self._events.bytes

    def push(self, crops: list[analytics_pb2.Crop], front: bool = False) -> int:
        """Append crops (or put them before the head, in order); returns how many of the oldest
        crops were dropped to stay within max_bytes (never an event)."""
        return self._push(self._crops, crops, front).crops

    def push_events(self, events: list[events_pb2.TrackEvent], front: bool = False) -> Trimmed:
        """Append track events (or put them before the head, in order); returns what was
        dropped to stay within max_bytes: the oldest crops first, then the oldest events."""
        return self._push(self._events, events, front)

    def _push(self, fifo: _Fifo, items: list[Any], front: bool) -> Trimmed:
        if not items:
            return Trimmed()
        blobs = [m.SerializeToString() for m in items]
        with self._lock:
            if front:
                first = fifo.head - len(blobs)
                seqs = range(first, fifo.head)
            else:
                first = fifo.tail + 1
                seqs = range(first, first + len(blobs))
            rows = [(s, len(b), b) for s, b in zip(seqs, blobs, strict=True)]
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    f"INSERT INTO {fifo.table} (seq, size, data) VALUES (?, ?, ?)", rows
                )
                if front or fifo.count == 0:
                    fifo.head = first
                if not front or fifo.count == 0:
                    fifo.tail = first + len(blobs) - 1
                fifo.count += len(rows)
                fifo.bytes += sum(r[1] for r in rows)
                crops = self._trim(self._crops)
                events = self._trim(self._events) if fifo is self._events else 0
                return Trimmed(crops, events)

    def _over(self) -> int:
        return self._crops.bytes + self._events.bytes - self.max_bytes

    def _trim(self, fifo: _Fifo) -> int:
        """Delete the table's oldest rows until within max_bytes (inside the caller's
        transaction); how many went."""
        dropped = 0
        while self._over() > 0 and fifo.count:
            cur = self._conn.execute(
                f"SELECT seq, size FROM {fifo.table} ORDER BY seq LIMIT 64"
            ).fetchall()
            cut = None
            for seq, size in cur:
                if self._over() <= 0:
                    break
                fifo.bytes -= int(size)
                fifo.count -= 1
                dropped += 1
                cut = int(seq)
            if cut is None:
                break
            self._conn.execute(f"DELETE FROM {fifo.table} WHERE seq <= ?", (cut,))
            fifo.head = cut + 1
            if not fifo.count:
                fifo.head, fifo.tail = 0, -1
        return dropped

    def pop(self, n: int) -> tuple[list[analytics_pb2.Crop], int]:
        """Up to n crops from the head, removed; and how many rows were unreadable (dropped)."""
        return self._pop(self._crops, n, analytics_pb2.Crop)

    def pop_events(self, n: int) -> tuple[list[events_pb2.TrackEvent], int]:
        """Up to n track events from the head, removed; and how many rows were unreadable."""
        return self._pop(self._events, n, events_pb2.TrackEvent)

    def _pop(self, fifo: _Fifo, n: int, kind: type[Any]) -> tuple[list[Any], int]:
        with self._lock:
            if not fifo.count or n <= 0:
                return [], 0
            rows = self._conn.execute(
                f"SELECT seq, size, data FROM {fifo.table} ORDER BY seq LIMIT ?", (n,)
            ).fetchall()
            if not rows:
                return [], 0
            last = int(rows[-1][0])
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.execute(f"DELETE FROM {fifo.table} WHERE seq <= ?", (last,))
            fifo.count -= len(rows)
            fifo.bytes -= sum(int(r[1]) for r in rows)
            fifo.head = last + 1
            if not fifo.count:
                fifo.head, fifo.tail = 0, -1
        out: list[Message] = []
        bad = 0
        for seq, _size, data in rows:
            try:
                out.append(kind.FromString(data))
            except DecodeError:
                bad += 1
                log.warning("uplink spool row %d of %s is unreadable; dropped", seq, fifo.table)
        return out, bad

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._lock_file.close()  # releases the flock
