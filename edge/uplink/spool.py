"""The uplink's on-disk queue: crops, track snapshots and track events in one SQLite file,
bounded in bytes together.

Crops the memory buffer cannot hold while the cloud is away wait here, in order, and survive
a restart of the edge: a FIFO keyed by a sequence number; pushing to the front (crops that
came back unacked) takes numbers below the smallest, so the order stays oldest first.

Track events are promised (an `end` is the only one of its track), so every one is written
here when offered, before its frame is settled, and its row goes only when the cloud's ack
is final: a `kill -9` at any point leaves every unacked event on disk, in order (rows are
appended with increasing numbers and read without removing them; `delete_events` removes
them). When the bound is reached the oldest crops make room; an event is refused (the
newest, counted by the caller) only when no crop is left, and a crop never pushes an event
out. Track snapshots (JPEGs) are promised too (an event names them): each is written here
when offered and its row goes when the cloud's ack is final, like an event
(`append_snapshots`, `load_snapshots`, `delete_snapshots`); they go before any event: the
oldest crops make room for them first, then the oldest snapshots; a snapshot never pushes
an event out, and an event pushes crops out, then snapshots.
WAL with synchronous=NORMAL: a killed process loses nothing; a power cut may lose the last
commits.
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

_TABLES = ("crops", "events", "snapshots")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {} "
    "(seq INTEGER PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)"
)


class SpoolError(RuntimeError):
    """The spool file cannot be opened or is not a crop spool."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What `append_events` did: the row numbers of the events written (a prefix of those
    given, in order), the oldest crops dropped to make room, and the events refused."""

    rows: tuple[int, ...] = ()
    crops_dropped: int = 0
    refused: int = 0
    snapshots_dropped: int = 0


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
        self._snaps = self._fifos["snapshots"]
        if self._crops.count or self._events.count or self._snaps.count:
            log.info(
                "uplink spool %s holds %d crops, %d track events and %d track snapshots from "
                "before; sending them first",
                path,
                self._crops.count,
                self._events.count,
                self._snaps.count,
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
    def snapshots(self) -> int:
        """Track snapshots waiting."""
        with self._lock:
            return self._snaps.count

    @property
    def bytes(self) -> int:
        """Bytes of every row, crops, snapshots and events: what the bound applies to."""
        with self._lock:
            return self._crops.bytes + self._events.bytes + self._snaps.bytes

    def push(self, crops: list[analytics_pb2.Crop], front: bool = False) -> int:
        """Append crops (or put them before the head, in order); returns how many of the oldest
        crops were dropped to stay within max_bytes (never a snapshot or an event)."""
        return self._push(self._crops, list(crops), front)[2]

    def push_snapshots(
        self, snaps: list[events_pb2.Snapshot], front: bool = False
    ) -> tuple[int, int]:
        """Append track snapshots (or put them before the head, in order), in one
        transaction; returns how many of the oldest crops, then of the oldest snapshots,
        were dropped to stay within max_bytes (never an event)."""
        _, crops, own = self._push(self._snaps, list(snaps), front, make_room=self._crops)
        return crops, own

    def _push(
        self, fifo: _Fifo, items: list[Message], front: bool, make_room: _Fifo | None = None
    ) -> tuple[int, int, int]:
        """Insert rows at the tail (or before the head); the oldest rows of `make_room`, then
        of `fifo` itself, go to stay within the bound. (first row number, dropped from each.)"""
        if not items:
            return fifo.tail + 1, 0, 0
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
                other = 0
                if make_room is not None:
                    other = self._trim(make_room, sum(r[1] for r in rows))
                self._conn.executemany(
                    f"INSERT INTO {fifo.table} (seq, size, data) VALUES (?, ?, ?)", rows
                )
                if front or fifo.count == 0:
                    fifo.head = first
                if not front or fifo.count == 0:
                    fifo.tail = first + len(blobs) - 1
                fifo.count += len(rows)
                fifo.bytes += sum(r[1] for r in rows)
                return first, other, self._trim(fifo)

    def append_events(self, events: list[events_pb2.TrackEvent]) -> Appended:
        """Write track events at the tail, in one transaction; the oldest crops make room
        first. Those that still do not fit are refused (the newest), never an older event."""
        if not events:
            return Appended()
        blobs = [m.SerializeToString() for m in events]
        need = sum(len(b) for b in blobs)
        fifo = self._events
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            dropped = self._trim(self._crops, need)
            snaps_dropped = self._trim(self._snaps, need)
            room = self.max_bytes - self._crops.bytes - self._snaps.bytes - fifo.bytes
            n = 0
            for b in blobs:
                if len(b) > room:
                    break
                room -= len(b)
                n += 1
            first = fifo.tail + 1
            rows = [(first + i, len(b), b) for i, b in enumerate(blobs[:n])]
            if rows:
                self._conn.executemany(
                    "INSERT INTO events (seq, size, data) VALUES (?, ?, ?)", rows
                )
                if fifo.count == 0:
                    fifo.head = first
                fifo.tail = first + n - 1
                fifo.count += n
                fifo.bytes += sum(r[1] for r in rows)
            return Appended(tuple(r[0] for r in rows), dropped, len(blobs) - n, snaps_dropped)

    def load_events(
        self, after: int, n: int
    ) -> tuple[list[tuple[int, events_pb2.TrackEvent]], int]:
        """Up to n events with row numbers above `after`, oldest first, left on disk (each
        goes with `delete_events` once final); and how many unreadable rows were removed."""
        return self._load(self._events, after, n, events_pb2.TrackEvent)

    def delete_events(self, rows: list[int]) -> None:
        """Remove events whose ack was final (row numbers from append_events or load_events;
        numbers not there are ignored). Row numbers are never reused."""
        self._delete(self._events, rows)

    def append_snapshots(self, snaps: list[events_pb2.Snapshot]) -> tuple[list[int], int, int]:
        """Write track snapshots at the tail, in one transaction, to stay until
        `delete_snapshots`: (their row numbers, the oldest crops dropped to make room, the
        oldest snapshots dropped to stay within max_bytes, possibly some of these)."""
        first, crops, own = self._push(self._snaps, list(snaps), False, make_room=self._crops)
        return list(range(first, first + len(snaps))), crops, own

    def load_snapshots(
        self, after: int, n: int
    ) -> tuple[list[tuple[int, events_pb2.Snapshot]], int]:
        """Up to n snapshots with row numbers above `after`, oldest first, left on disk; and
        how many unreadable rows were removed."""
        return self._load(self._snaps, after, n, events_pb2.Snapshot)

    def delete_snapshots(self, rows: list[int]) -> None:
        """Remove snapshots whose ack was final (numbers not there are ignored)."""
        self._delete(self._snaps, rows)

    @property
    def snapshot_head(self) -> int:
        """Rows of snapshots below this number are gone: dropped to make room (or popped)."""
        with self._lock:
            return self._snaps.head

    def snapshots_after(self, row: int) -> int:
        """Snapshots on disk with row numbers above `row`."""
        with self._lock:
            got = self._conn.execute("SELECT count(*) FROM snapshots WHERE seq > ?", (row,))
            return int(got.fetchone()[0])

    def _load(self, fifo: _Fifo, after: int, n: int, kind: type[Any]) -> tuple[list[Any], int]:
        with self._lock:
            if n <= 0 or not fifo.count:
                return [], 0
            rows = self._conn.execute(
                f"SELECT seq, data FROM {fifo.table} WHERE seq > ? ORDER BY seq LIMIT ?",
                (after, n),
            ).fetchall()
        out: list[tuple[int, Any]] = []
        bad: list[int] = []
        for seq, data in rows:
            try:
                out.append((int(seq), kind.FromString(data)))
            except DecodeError:
                bad.append(int(seq))
                log.warning("uplink spool row %d of %s is unreadable; dropped", seq, fifo.table)
        self._delete(fifo, bad)
        return out, len(bad)

    def _delete(self, fifo: _Fifo, rows: list[int]) -> None:
        if not rows:
            return
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            gone = 0
            size = 0
            for i in range(0, len(rows), 500):
                chunk = rows[i : i + 500]
                marks = ",".join("?" * len(chunk))
                got = self._conn.execute(
                    f"SELECT count(*), coalesce(sum(size), 0) FROM {fifo.table} "
                    f"WHERE seq IN ({marks})",
                    chunk,
                ).fetchone()
                gone += int(got[0])
                size += int(got[1])
                self._conn.execute(f"DELETE FROM {fifo.table} WHERE seq IN ({marks})", chunk)
            fifo.count -= gone
            fifo.bytes -= size

    def _trim(self, fifo: _Fifo, extra: int = 0) -> int:
        """Delete the table's oldest rows until `extra` more bytes fit within max_bytes
        (inside the caller's transaction); how many went."""
        dropped = 0

        def over() -> int:
            used = self._crops.bytes + self._events.bytes + self._snaps.bytes
            return used + extra - self.max_bytes

        while over() > 0 and fifo.count:
            cur = self._conn.execute(
                f"SELECT seq, size FROM {fifo.table} ORDER BY seq LIMIT 64"
            ).fetchall()
            cut = None
            for seq, size in cur:
                if over() <= 0:
                    break
                fifo.bytes -= int(size)
                fifo.count -= 1
                dropped += 1
                cut = int(seq)
            if cut is None:
                break
            self._conn.execute(f"DELETE FROM {fifo.table} WHERE seq <= ?", (cut,))
            fifo.head = cut + 1
        return dropped

    def pop(self, n: int) -> tuple[list[analytics_pb2.Crop], int]:
        """Up to n crops from the head, removed; and how many rows were unreadable (dropped)."""
        return self._pop(self._crops, n, analytics_pb2.Crop)

    def pop_snapshots(self, n: int) -> tuple[list[events_pb2.Snapshot], int]:
        """Up to n track snapshots from the head, removed; and how many rows were unreadable."""
        return self._pop(self._snaps, n, events_pb2.Snapshot)

    def pop_events(self, n: int) -> tuple[list[events_pb2.TrackEvent], int]:
        """Up to n track events from the head, removed (a failed peer's spool, taken over);
        and how many rows were unreadable."""
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
