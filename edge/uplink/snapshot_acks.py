"""The uplink's track snapshots (edge/uplink/stream.py): offered to their SnapshotQueue
(edge/uplink/snapshots.py), and settled by the cloud's acks."""

from __future__ import annotations

import logging

from strata.edge.uplink.inflight import (
    SnapPending,
    UplinkParts,
    UplinkStream,
)
from strata.shared.contracts import analytics_pb2, events_pb2

log = logging.getLogger(__name__)


class SnapshotPayload(UplinkParts):
    """Track snapshots: offered, and settled by the acks."""

    def offer_snapshots(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Hand track snapshots to the cloud; never waits for the network. With a spool they
        are on disk when this returns (one transaction), where they drop before any event
        (counted)."""
        if not snaps:
            return
        self._snaps.offer(snaps)
        with self._cond:
            self._cond.notify()

    @property
    def snapshots_waiting(self) -> int:
        """Track snapshots not yet acked final: waiting (memory, disk) and in flight."""
        with self._cond:
            flying = sum(len(s.snapshots) for s in self._streams)
        return flying + len(self._snaps)

    def _on_snapshot_acks(
        self, stream: UplinkStream, resp: analytics_pb2.UplinkResponse, now: float
    ) -> None:
        """Settle the stream's snapshots the response acks: final, or back to the front with
        the cloud's retry_after_ms. A cloud before 2.2 stores none (SnapshotQueue.old_cloud)."""
        if resp.version.minor < 2:
            with self._cond:
                flying = [p.snap for p in stream.snapshots.values()]
                stream.snapshots.clear()
            if flying or resp.snapshot_acks:
                self._snaps.old_cloud(flying, resp.version.minor)
            return
        retry: list[SnapPending] = []
        for ack in resp.snapshot_acks:
            with self._cond:
                p = stream.snapshots.pop(ack.snapshot_id, None)
            if p is None:
                continue
            if self._snaps.acked(ack):
                self.breaker.success(now - p.sent, probe=p.probe)
            else:
                retry.append(p)
                self._retry_until = max(self._retry_until, now + ack.retry_after_ms / 1e3)
        if retry:
            self.breaker.failure(
                "cloud busy: snapshots got RETRY", probe=any(p.probe for p in retry)
            )
            self._snaps.requeue([p.snap for p in sorted(retry, key=lambda q: q.sent)])
