"""`SnapshotQueue`: the uplink's track snapshots (events.proto `Snapshot`) waiting for the
cloud, in memory and spilled to the spool.

Snapshots are JPEGs, larger than events and less precious: memory holds `snapshot_queue`
of them; beyond it (or while older ones wait on disk) they spill to the spool's own FIFO,
which makes room by dropping crops first, then the oldest snapshots, never an event (an
event pushes snapshots out). Without a spool the oldest in memory drop. Every drop is
counted in `strata_edge_uplink_snapshot_drops_total{reason}` and logged. A snapshot goes
when the cloud acks it STORED, DUPLICATE or INVALID; RETRY, a broken stream or an ack
timeout put it back at the front. A cloud older than protocol 2.2 acks none: those in
flight and those offered for OLD_CLOUD_PAUSE_S after its answer are dropped (counted,
`cloud_too_old`), so they never fill the spool that events need.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable

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
        self._buf: deque[events_pb2.Snapshot] = deque()
        self._lock = threading.Lock()
        self._old_cloud_until = 0.0

    def __len__(self) -> int:
        """Snapshots waiting, in memory and on disk."""
        with self._lock:
            return len(self._buf) + (self.spool.snapshots if self.spool is not None else 0)

    def offer(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Queue snapshots; beyond memory they spill to the spool; drops counted."""
        if not snaps:
            return
        self.metrics.uplink_snapshots.labels("offered").inc(len(snaps))
        if time.monotonic() < self._old_cloud_until:
            self.dropped("cloud_too_old", len(snaps))
            return
        with self._lock:
            if self.spool is None:
                over = max(0, len(self._buf) + len(snaps) - self.limit)
                self._buf.extend(snaps)
                for _ in range(over):
                    self._buf.popleft()
                self._gauges()
                if over:
                    self.dropped("snapshot_buffer_full", over)
                return
            room = self.limit - len(self._buf) if not self.spool.snapshots else 0
            self._buf.extend(snaps[: max(0, room)])
            self._spill(snaps[max(0, room) :], front=False)
            self._gauges()

    def take(self) -> list[events_pb2.Snapshot]:
        """The next snapshots for one batch (at least one when any wait)."""
        with self._lock:
            self._refill()
            out: list[events_pb2.Snapshot] = []
            size = 0
            while self._buf and len(out) < SNAPSHOTS_PER_BATCH:
                n = self._buf[0].ByteSize()
                if out and size + n > SNAPSHOT_BYTES_PER_BATCH:
                    break
                out.append(self._buf.popleft())
                size += n
            self._gauges()
            return out

    def requeue(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Back to the front, in order (not acked: RETRY, a broken stream, a timeout)."""
        if not snaps:
            return
        with self._lock:
            self._buf.extendleft(reversed(snaps))
            over = len(self._buf) - self.limit
            if over > 0 and self.spool is not None:
                tail = [self._buf.pop() for _ in range(over)]
                tail.reverse()
                self._spill(tail, front=True)
            elif over > 0:
                for _ in range(over):
                    self._buf.popleft()
                self.dropped("snapshot_buffer_full", over)
            self._gauges()

    def park(self, snaps: list[events_pb2.Snapshot]) -> None:
        """At stop: the unacked (oldest first) and every buffered one to the spool's front;
        without a spool they are dropped, counted."""
        with self._lock:
            left = list(snaps) + list(self._buf)
            self._buf.clear()
            if left and self.spool is not None:
                self._spill(left, front=True)
                log.info("uplink: %d unsent track snapshots kept in %s", len(left), self.spool.path)
            elif left:
                self.dropped("uplink_shutdown", len(left))
            self._gauges()

    def old_cloud(self, in_flight: list[events_pb2.Snapshot], minor: int) -> None:
        """A cloud older than 2.2 answered: it stores no snapshot. Those in flight drop, and
        new ones for OLD_CLOUD_PAUSE_S after its last answer."""
        was = time.monotonic() < self._old_cloud_until
        self._old_cloud_until = time.monotonic() + OLD_CLOUD_PAUSE_S
        if in_flight:
            self.dropped("cloud_too_old", len(in_flight))
        if not was:
            log.warning(
                "the cloud speaks protocol 2.%d, before track snapshots (2.2): snapshots are "
                "dropped while it answers",
                minor,
            )

    def acked(self, ack: events_pb2.SnapshotAck) -> bool:
        """Count a final ack (True), or a RETRY / unknown status (False: send again)."""
        status = _FINAL.get(ack.status)
        if status is None:
            self.metrics.uplink_snapshots.labels("retry").inc()
            return False
        self.metrics.uplink_snapshots.labels(status).inc()
        if ack.status == events_pb2.SNAPSHOT_STATUS_INVALID:
            self.metrics.uplink_snapshot_drops.labels("snapshot_invalid").inc()
            log.warning("cloud rejected track snapshot %s: %s", ack.snapshot_id, ack.reason)
        return True

    def dropped(self, reason: str, n: int) -> None:
        """Count and log snapshots lost for `reason`."""
        self.metrics.uplink_snapshot_drops.labels(reason).inc(n)
        log.warning("dropped %d track snapshots (%s)", n, reason)

    # lock held

    def _spill(self, snaps: list[events_pb2.Snapshot], front: bool) -> None:
        assert self.spool is not None
        if not snaps:
            return
        try:
            crops, own = self.spool.push_snapshots(snaps, front=front)
        except sqlite3.Error as exc:
            log.error("uplink spool %s failed: %s", self.spool.path, exc)
            self.dropped("uplink_spool_error", len(snaps))
            return
        if crops:
            self._crops_dropped("uplink_spool_full_snapshots", crops)
        if own:
            self.dropped("uplink_spool_full", own)

    def _refill(self) -> None:
        if self.spool is None or len(self._buf) > self.limit // 2 or not self.spool.snapshots:
            return
        try:
            snaps, bad = self.spool.pop_snapshots(self.limit - len(self._buf))
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self.spool.path, exc)
            return
        self._buf.extend(snaps)
        if bad:
            self.dropped("uplink_spool_corrupt", bad)

    def _gauges(self) -> None:
        self.metrics.snapshot_queue.set(len(self._buf))
        if self.spool is not None:
            self.metrics.spool_snapshots.set(self.spool.snapshots)
