"""The uplink's on-disk crop queue: a FIFO in one SQLite file, bounded in bytes.

Crops the memory buffer cannot hold while the cloud is away wait here, in order, and survive a
restart of the edge. Rows are keyed by a sequence number; pushing to the front (crops that
came back unacked) takes numbers below the smallest, so the order stays oldest first. Beyond
the byte bound the oldest rows go, and the caller counts them. WAL with synchronous=NORMAL: a
killed process loses nothing; a power cut may lose the last commits.
"""

from __future__ import annotations

import fcntl
import logging
import sqlite3
import threading
from pathlib import Path

from google.protobuf.message import DecodeError
from strata.shared.contracts import analytics_pb2

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS crops "
    "(seq INTEGER PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)"
)


class SpoolError(RuntimeError):
    """The spool file cannot be opened or is not a crop spool."""


class CropSpool:
    """FIFO of crops on disk; push and pop are thread-safe, each one transaction."""

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
            self._conn.execute(_SCHEMA)
            row = self._conn.execute(
                "SELECT count(*), coalesce(sum(size), 0), min(seq), max(seq) FROM crops"
            ).fetchone()
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"cannot open the uplink spool {path}: {exc}") from exc
        self._lock = threading.Lock()
        self._count, self._bytes = int(row[0]), int(row[1])
        self._head = int(row[2]) if row[2] is not None else 0
        self._tail = int(row[3]) if row[3] is not None else -1
        if self._count:
            log.info(
                "uplink spool %s holds %d crops from before; sending them first", path, self._count
            )

    def __len__(self) -> int:
        with self._lock:
            return self._count

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def push(self, crops: list[analytics_pb2.Crop], front: bool = False) -> int:
        """Append crops (or put them before the head, in order); returns how many of the oldest
        were dropped to stay within max_bytes."""
        if not crops:
            return 0
        blobs = [c.SerializeToString() for c in crops]
        with self._lock:
            if front:
                first = self._head - len(blobs)
                seqs = range(first, self._head)
            else:
                first = self._tail + 1
                seqs = range(first, first + len(blobs))
            rows = [(s, len(b), b) for s, b in zip(seqs, blobs, strict=True)]
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.executemany("INSERT INTO crops (seq, size, data) VALUES (?, ?, ?)", rows)
                if front or self._count == 0:
                    self._head = first
                if not front or self._count == 0:
                    self._tail = first + len(blobs) - 1
                self._count += len(rows)
                self._bytes += sum(r[1] for r in rows)
                return self._trim()

    def _trim(self) -> int:
        """Delete the oldest rows until within max_bytes (inside the caller's transaction)."""
        dropped = 0
        while self._bytes > self.max_bytes and self._count:
            cur = self._conn.execute("SELECT seq, size FROM crops ORDER BY seq LIMIT 64").fetchall()
            cut = None
            for seq, size in cur:
                if self._bytes <= self.max_bytes:
                    break
                self._bytes -= int(size)
                self._count -= 1
                dropped += 1
                cut = int(seq)
            if cut is None:
                break
            self._conn.execute("DELETE FROM crops WHERE seq <= ?", (cut,))
            self._head = cut + 1
        return dropped

    def pop(self, n: int) -> tuple[list[analytics_pb2.Crop], int]:
        """Up to n crops from the head, removed; and how many rows were unreadable (dropped)."""
        with self._lock:
            if not self._count or n <= 0:
                return [], 0
            rows = self._conn.execute(
                "SELECT seq, size, data FROM crops ORDER BY seq LIMIT ?", (n,)
            ).fetchall()
            if not rows:
                return [], 0
            last = int(rows[-1][0])
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.execute("DELETE FROM crops WHERE seq <= ?", (last,))
            self._count -= len(rows)
            self._bytes -= sum(int(r[1]) for r in rows)
            self._head = last + 1
            if not self._count:
                self._head, self._tail = 0, -1
        out: list[analytics_pb2.Crop] = []
        bad = 0
        for seq, _size, data in rows:
            try:
                out.append(analytics_pb2.Crop.FromString(data))
            except DecodeError:
                bad += 1
                log.warning("uplink spool row %d is not a crop; dropped", seq)
        return out, bad

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._lock_file.close()  # releases the flock
