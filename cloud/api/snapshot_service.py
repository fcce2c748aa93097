"""Track snapshots on the Analytics service: taken from Uplink batches, served by GetSnapshot.

A snapshot from an edge is checked (snapshot_checks: size, a JPEG that decodes, its id),
handed to the store's writer before the batch's events (an event naming it commits with or
after it) and acked only from the writer's answer: STORED after its transaction committed,
DUPLICATE when this id or a higher revision of the track's snapshot of that kind is stored,
INVALID (final, with the reason; counted and logged; never stored) for bad input, RETRY
with a hint when the store is busy or down.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import grpc
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import (
    analytics_pb2,
    current_version,
    events_pb2,
)
from strata.shared.imagecheck import ImageLimits
from strata.shared.snapshot_ids import kind_name

from ..metrics import CloudMetrics
from ..store.event_store import StoreError
from ..store.snapshot_rows import SnapshotLookupError, SnapshotQuery, StoredSnapshot
from .batch_acks import BatchAcks
from .item_acks import Refusal, StoredItemAcks
from .request_version import require_version
from .service_parts import ServiceParts
from .snapshot_checks import check_snapshot

log = logging.getLogger(__name__)

UPLINK, GET_SNAPSHOT = "Uplink", "GetSnapshot"
_S = events_pb2


_REFUSED = {
    Refusal.INVALID: _S.SNAPSHOT_STATUS_INVALID,
    Refusal.RETRY: _S.SNAPSHOT_STATUS_RETRY,
}


class SnapshotAcks(StoredItemAcks[events_pb2.Snapshot, StoredSnapshot]):
    """How a snapshot is named, counted and acked."""

    what, code_prefix = "snapshot", "snapshot_"

    def key(self, item: events_pb2.Snapshot) -> str:
        return item.snapshot_id

    def count(self, item: events_pb2.Snapshot, refusal: Refusal, code: str) -> None:
        if refusal is Refusal.INVALID:
            self.metrics.snapshots_invalid.labels(kind_name(item.kind), code).inc()
        else:
            self.metrics.snapshots_retry.labels(kind_name(item.kind)).inc()

    def ack(
        self,
        acks: BatchAcks,
        i: int,
        item: events_pb2.Snapshot,
        refusal: Refusal,
        reason: str,
        after_ms: int = 0,
    ) -> None:
        acks.set_snapshot(i, _ack(item.snapshot_id, _REFUSED[refusal], reason, after_ms))

    def ack_stored(
        self, acks: BatchAcks, i: int, item: events_pb2.Snapshot, got: StoredSnapshot
    ) -> None:
        kind = kind_name(item.kind)
        if got.duplicate:
            self.metrics.snapshots_duplicate.labels(kind).inc()
            status = _S.SNAPSHOT_STATUS_DUPLICATE
        else:
            self.metrics.snapshots_stored.labels(kind).inc()
            self.metrics.snapshot_bytes.labels(item.camera_id).inc(len(item.jpeg))
            status = _S.SNAPSHOT_STATUS_STORED
        reason = "" if got.snapshot_id == item.snapshot_id else f"kept {got.snapshot_id}"
        acks.set_snapshot(i, _ack(item.snapshot_id, status, reason))


def _ack(sid: str, status: int, reason: str = "", after_ms: int = 0) -> events_pb2.SnapshotAck:
    return events_pb2.SnapshotAck(
        snapshot_id=sid,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        retry_after_ms=after_ms,
    )


class Snapshots:
    """The snapshot part of the service (crops: service.AnalyticsService; track events:
    track_service.TrackEvents)."""

    def __init__(self, cfg: CloudConfig, parts: ServiceParts, metrics: CloudMetrics) -> None:
        self.cfg = cfg
        self.store = parts.store
        self.drops = parts.drops
        self.executor = parts.executor
        self.metrics = metrics
        self.answers = SnapshotAcks(parts.drops, metrics, cfg.batcher.retry_after_ms)
        lim = cfg.limits
        self.limits = ImageLimits(lim.max_image_width, lim.max_image_height, lim.max_image_pixels)

    # Uplink

    def start(self, snaps: list[events_pb2.Snapshot], acks: BatchAcks) -> None:
        """Check and hand over a batch's snapshots (on a request thread); each is acked
        through `acks` when its fate is known."""
        for k, snap in enumerate(snaps):
            self.answers.guarded(k, snap, acks, partial(self._start_one, k, snap, acks))

    def _start_one(self, k: int, snap: events_pb2.Snapshot, acks: BatchAcks) -> None:
        self.metrics.snapshots_received.labels(kind_name(snap.kind)).inc()
        bad = check_snapshot(snap, self.cfg.snapshots.max_bytes, self.limits)
        if bad is not None:
            self.answers.invalid(k, snap, acks, bad.code, str(bad))
            return
        self.answers.submit(k, snap, acks, self.store.submit_snapshot)

    # GetSnapshot

    async def get(
        self,
        request: analytics_pb2.GetSnapshotRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> analytics_pb2.GetSnapshotResponse:
        """The snapshot the request names, JPEG included; NOT_FOUND when none is stored."""
        await require_version(request.version, GET_SNAPSHOT, self.drops, context)
        q = SnapshotQuery(
            event_key=request.event_key,
            snapshot_id=request.snapshot_id,
            camera_id=request.camera_id,
            track_uid=request.track_uid,
            kind=int(request.kind),
        )
        loop = asyncio.get_running_loop()
        status: tuple[grpc.StatusCode, str, str] | None = None
        try:
            found = await loop.run_in_executor(self.executor, self.store.find_snapshot, q)
        except SnapshotLookupError as exc:
            status = (grpc.StatusCode.INVALID_ARGUMENT, "bad_request", str(exc))
        except LookupError as exc:
            status = (grpc.StatusCode.NOT_FOUND, "not_found", str(exc.args[0]))
        except StoreError as exc:
            status = (grpc.StatusCode.UNAVAILABLE, "store_error", f"event store: {exc}")
        if status is None and found is None:
            what = kind_name(q.kind or _S.SNAPSHOT_KIND_BEST_CROP)
            status = (grpc.StatusCode.NOT_FOUND, "not_found", f"no {what} snapshot stored")
        if status is not None:
            self.drops(GET_SNAPSHOT, status[1], status[2])
            await context.abort(status[0], status[2])
        assert found is not None
        self.metrics.ok(GET_SNAPSHOT)
        return analytics_pb2.GetSnapshotResponse(
            version=current_version(), snapshot=found.snapshot, stored_ns=found.stored_ns
        )
