"""`SnapshotQueue`: the uplink's track snapshots (events.proto `Snapshot`) waiting for the
cloud, written through to the spool.

A snapshot is promised once offered (the track's events name it), so with a spool each one
is written to the spool's `snapshots` table when offered (one transaction, before its frame
is settled) and its row goes only when the cloud's ack is final (STORED, DUPLICATE,
INVALID): a `kill -9` at any point leaves every unacked snapshot on disk, and the next start
sends it again (the cloud acks a copy DUPLICATE). Memory holds a window of `snapshot_queue`
of them read from the spool in order; RETRY, a broken stream or an ack timeout put the
unacked back at the front. Snapshots are JPEGs, larger than events and less precious: when
the spool is full the oldest crops make room, then the oldest snapshots (a window's copy
that was dropped from disk is dropped from memory too; one already in flight still goes),
never an event (an event pushes snapshots out). Without a spool, memory holds
`snapshot_queue` and the oldest drop. Every drop is counted in
`strata_edge_uplink_snapshot_drops_total{reason}` and logged. A cloud older than protocol
2.2 acks none: those in flight and those offered for OLD_CLOUD_PAUSE_S after its answer are
dropped (counted, `cloud_too_old`), so they never fill the spool that events need.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.spool import CropSpool
from strata.shared.contracts import events_pb2

log = logging.getLogger(__name__)

# Most snapshots, and bytes of them, in one CropBatch (the cloud's message limit is 16 MiB).
SNAPSHOTS_PER_BATCH = 8
SNAPSHOT_BYTES_PER_BATCH = 4 * 1024 * 1024
OLD_CLOUD_PAUSE_S = 30.0
_FINAL = {
    events_pb2.SNAPSHOT_STATUS_STORED: "stored",
    events_pb2.SNAPSHOT_STATUS_DUPLICATE: "duplicate",
    events_pb2.SNAPSHOT_STATUS_INVALID: "invalid",
}
# The row of a snapshot held in memory only (no spool).
_NO_ROW = -1


@dataclass(frozen=True, slots=True)
class _Held:
    """A snapshot waiting in memory and its spool row (_NO_ROW without a spool)."""

    snap: events_pb2.Snapshot
    row: int


class SnapshotQueue:
    """Snapshots waiting to be sent (thread-safe; its own lock)."""

    def __init__(
        self,
        limit: int,
        spool: CropSpool | None,
        metrics: EdgeMetrics,
        crops_dropped: Callable[[str, int], None],
    ) -> None:
        self.limit = limit
        self.spool = spool
        self.metrics = metrics
        # Crops the spool dropped to make room for snapshots (the uplink counts crops).
        self._crops_dropped = crops_dropped
        self._buf: deque[_Held] = deque()
        # Snapshot id -> spool rows of its copies taken for sending and not yet final.
        self._flying: dict[str, deque[int]] = {}
        # With a spool: memory holds rows up to _loaded; the _unloaded rows after them wait
        # on disk only.
        self._loaded = -(2**62)
        self._unloaded = spool.snapshots if spool is not None else 0
        self._lock = threading.Lock()
        self._old_cloud_until = 0.0

    def __len__(self) -> int:
        """Snapshots waiting to be sent, in memory and on disk (not those in flight)."""
        with self._lock:
            return len(self._buf) + self._unloaded

    def offer(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Queue snapshots: with a spool on disk when this returns; drops counted."""
        if not snaps:
            return
        self.metrics.uplink_snapshots.labels("offered").inc(len(snaps))
        if time.monotonic() < self._old_cloud_until:
            self.dropped("cloud_too_old", len(snaps))
            return
        with self._lock:
            if self.spool is None:
                over = max(0, len(self._buf) + len(snaps) - self.limit)
                self._buf.extend(_Held(s, _NO_ROW) for s in snaps)
                for _ in range(over):
                    self._buf.popleft()
                self._gauges()
                if over:
                    self.dropped("snapshot_buffer_full", over)
                return
            try:
                rows, crops, own = self.spool.append_snapshots(snaps)
            except sqlite3.Error as exc:
                log.error("uplink spool %s failed: %s", self.spool.path, exc)
                self.dropped("uplink_spool_error", len(snaps))
                return
            for snap, row in zip(snaps, rows, strict=True):
                if self._unloaded or len(self._buf) >= self.limit:
                    self._unloaded += 1
                else:
                    self._buf.append(_Held(snap, row))
                    self._loaded = row
            if crops:
                self._crops_dropped("uplink_spool_full_snapshots", crops)
            if own:
                self._cut("uplink_spool_full", own)
            self._gauges()

    def trimmed(self, reason: str, n: int) -> None:
        """The spool dropped its n oldest snapshots to make room (for track events)."""
        if n:
            with self._lock:
                self._cut(reason, n)
                self._gauges()

    def take(self) -> list[events_pb2.Snapshot]:
        """The next snapshots for one batch (at least one when any wait); they are in
        flight until `acked` final or `requeue`d."""
        with self._lock:
            self._refill()
            out: list[events_pb2.Snapshot] = []
            size = 0
            while self._buf and len(out) < SNAPSHOTS_PER_BATCH:
                n = self._buf[0].snap.ByteSize()
                if out and size + n > SNAPSHOT_BYTES_PER_BATCH:
                    break
                held = self._buf.popleft()
                out.append(held.snap)
                self._flying.setdefault(held.snap.snapshot_id, deque()).append(held.row)
                size += n
            self._gauges()
            return out

    def requeue(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Back to the front, in order (not acked: RETRY, a broken stream, a timeout). With
        a spool memory may pass its bound by what was in flight; without, the oldest drop."""
        if not snaps:
            return
        with self._lock:
            self._buf.extendleft(reversed([_Held(s, self._unfly(s.snapshot_id)) for s in snaps]))
            over = len(self._buf) - self.limit
            if over > 0 and self.spool is None:
                for _ in range(over):
                    self._buf.popleft()
                self.dropped("snapshot_buffer_full", over)
            self._gauges()

    def park(self, snaps: list[events_pb2.Snapshot]) -> None:
        """At stop: with a spool every unacked one is on disk already; without, those in
        flight and buffered are dropped, counted."""
        with self._lock:
            left = len(snaps) + len(self._buf) + self._unloaded
            self._buf.clear()
            self._flying.clear()
            if left and self.spool is not None:
                log.info("uplink: %d unacked track snapshots kept in %s", left, self.spool.path)
            elif left:
                self.dropped("uplink_shutdown", left)
            self._gauges()

    def old_cloud(self, in_flight: list[events_pb2.Snapshot], minor: int) -> None:
        """A cloud older than 2.2 answered: it stores no snapshot. Those in flight drop, and
        new ones for OLD_CLOUD_PAUSE_S after its last answer."""
        was = time.monotonic() < self._old_cloud_until
        self._old_cloud_until = time.monotonic() + OLD_CLOUD_PAUSE_S
        if in_flight:
            with self._lock:
                self._forget([self._unfly(s.snapshot_id) for s in in_flight])
                self._gauges()
            self.dropped("cloud_too_old", len(in_flight))
        if not was:
            log.warning(
                "the cloud speaks protocol 2.%d, before track snapshots (2.2): snapshots are "
                "dropped while it answers",
                minor,
            )

    def acked(self, ack: events_pb2.SnapshotAck) -> bool:
        """Count a final ack (True: its row leaves the spool), or a RETRY / unknown status
        (False: the caller requeues it)."""
        status = _FINAL.get(ack.status)
        if status is None:
            self.metrics.uplink_snapshots.labels("retry").inc()
            return False
        self.metrics.uplink_snapshots.labels(status).inc()
        with self._lock:
            self._forget([self._unfly(ack.snapshot_id)])
            self._gauges()
        if ack.status == events_pb2.SNAPSHOT_STATUS_INVALID:
            self.metrics.uplink_snapshot_drops.labels("snapshot_invalid").inc()
            log.warning("cloud rejected track snapshot %s: %s", ack.snapshot_id, ack.reason)
        return True

    def dropped(self, reason: str, n: int) -> None:
        """Count and log snapshots lost for `reason`."""
        self.metrics.uplink_snapshot_drops.labels(reason).inc(n)
        log.warning("dropped %d track snapshots (%s)", n, reason)

    # lock held

    def _unfly(self, snapshot_id: str) -> int:
        """The row of the oldest copy of `snapshot_id` in flight, no longer in flight."""
        rows = self._flying.get(snapshot_id)
        if not rows:
            return _NO_ROW
        row = rows.popleft()
        if not rows:
            del self._flying[snapshot_id]
        return row

    def _forget(self, rows: list[int]) -> None:
        """Final (or dropped) snapshots leave the spool; a failure there only means they are
        sent again after a restart, and the cloud acks those DUPLICATE."""
        rows = [r for r in rows if r != _NO_ROW]
        if self.spool is None or not rows:
            return
        try:
            self.spool.delete_snapshots(rows)
        except sqlite3.Error as exc:
            log.error(
                "uplink spool %s: acked track snapshots not removed: %s", self.spool.path, exc
            )

    def _cut(self, reason: str, n: int) -> None:
        """The spool dropped its n oldest snapshot rows: drop their copies in memory too,
        count all but those already in flight (they still go), re-count what waits on disk."""
        assert self.spool is not None
        head = self.spool.snapshot_head
        flying = sum(1 for rows in self._flying.values() for r in rows if r < head)
        self._buf = deque(h for h in self._buf if h.row >= head)
        try:
            self._unloaded = self.spool.snapshots_after(self._loaded)
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self.spool.path, exc)
        if n - flying > 0:
            self.dropped(reason, n - flying)

    def _refill(self) -> None:
        """Read the next snapshots from the spool when memory runs low; rows stay."""
        if self.spool is None or not self._unloaded or len(self._buf) > self.limit // 2:
            return
        try:
            rows, bad = self.spool.load_snapshots(self._loaded, self.limit - len(self._buf))
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self.spool.path, exc)
            return
        for row, snap in rows:
            self._buf.append(_Held(snap, row))
            self._loaded = row
        self._unloaded = max(0, self._unloaded - len(rows) - bad)
        if bad:
            self.dropped("uplink_spool_corrupt", bad)

    def _gauges(self) -> None:
        self.metrics.snapshot_queue.set(len(self._buf))
        if self.spool is not None:
            self.metrics.spool_snapshots.set(self.spool.snapshots)
