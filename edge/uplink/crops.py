"""The uplink's crops (edge/uplink/stream.py): a bounded memory buffer that spills, in
order, to the spool and drains back from it; what neither holds drops, counted."""

from __future__ import annotations

import logging
import sqlite3

from strata.edge.uplink.inflight import (
    UplinkParts,
)
from strata.shared.contracts import analytics_pb2

log = logging.getLogger(__name__)


class CropPayload(UplinkParts):
    """Crops: offered, spilled, refilled and requeued; the counts of each."""

    def offer(self, crops: list[analytics_pb2.Crop]) -> None:
        """Buffer crops for the cloud; never waits for the network. Beyond the memory bound
        they spill to the spool (in order); beyond both, the oldest drop, counted."""
        if not crops:
            return
        # Every crop handed over: offered = stored + invalid + dropped (by reason), in the end.
        self.metrics.crops.labels("offered").inc(len(crops))
        with self._cond:
            if self._spool is not None:
                # Memory takes crops only while nothing waits on disk, so order holds.
                room = self.cfg.queue - len(self._buf) if not len(self._spool) else 0
                self._buf.extend(crops[: max(0, room)])
                spill = crops[max(0, room) :]
                if spill:
                    self._to_spool(spill, front=False)
                dropped = 0
            else:
                dropped = 0
                for c in crops:
                    if len(self._buf) >= self.cfg.queue:
                        self._buf.popleft()
                        dropped += 1
                    self._buf.append(c)
            self._gauges()
            self._cond.notify()
        if dropped:
            self._dropped("crop_buffer_full", dropped)

    def _to_spool(self, crops: list[analytics_pb2.Crop], front: bool) -> None:
        """Write crops to the spool (caller holds the lock); failures and overflow counted."""
        assert self._spool is not None
        try:
            over = self._spool.push(crops, front=front)
        except sqlite3.Error as exc:
            log.error("uplink spool %s failed: %s", self._spool.path, exc)
            self._dropped("uplink_spool_error", len(crops))
            return
        if over:
            self._dropped("uplink_spool_full", over)

    def _dropped(self, reason: str, n: int) -> None:
        self.metrics.drops.labels(reason).inc(n)
        log.warning(
            "dropped %d crops (%s%s): memory %d, spool %s; breaker %s",
            n,
            reason,
            ", to keep track events" if reason == "uplink_spool_full_events" else "",
            self.cfg.queue,
            f"{self.cfg.spool_max_mib:g} MiB" if self._spool is not None else "off",
            self.breaker.state.name,
        )

    @property
    def buffered(self) -> int:
        """Crops waiting for the cloud, in memory and on disk."""
        with self._cond:
            return len(self._buf) + (len(self._spool) if self._spool is not None else 0)

    @property
    def waiting(self) -> int:
        """Crops not yet acked: in memory, on disk and in flight."""
        with self._cond:
            flying = sum(len(s.pending) for s in self._streams)
            return flying + len(self._buf) + (len(self._spool) if self._spool is not None else 0)

    @property
    def spooled(self) -> int:
        """Crops waiting on disk."""
        with self._cond:
            return len(self._spool) if self._spool is not None else 0

    def _refill(self) -> None:
        """Move crops from the spool's head into memory when memory runs low (lock held)."""
        if self._spool is None or len(self._buf) > self.cfg.queue // 2 or not len(self._spool):
            return
        try:
            crops, bad = self._spool.pop(self.cfg.queue - len(self._buf))
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self._spool.path, exc)
            return
        self._buf.extend(crops)
        if bad:
            self._dropped("uplink_spool_corrupt", bad)

    def _requeue(self, crops: list[analytics_pb2.Crop]) -> None:
        """Back to the front, oldest first. Over the memory bound, the newest in memory move
        to the front of the spool (order kept); without a spool the oldest drop."""
        if not crops:
            return
        over = 0
        with self._cond:
            self._buf.extendleft(reversed(crops))
            over = len(self._buf) - self.cfg.queue
            if over > 0 and self._spool is not None:
                tail = [self._buf.pop() for _ in range(over)]
                tail.reverse()
                self._to_spool(tail, front=True)
                over = 0
            for _ in range(max(0, over)):
                self._buf.popleft()
            self._gauges()
        if over > 0:
            self._dropped("crop_buffer_full", over)
