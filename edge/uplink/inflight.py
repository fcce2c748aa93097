"""What the uplink's halves share (edge/uplink/stream.py): a batch, what is in flight on a
stream, and the state they all read (`UplinkParts`)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.breaker import CircuitBreaker
from strata.edge.uplink.snapshots import SnapshotQueue
from strata.edge.uplink.spool import CropSpool
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2, events_pb2

# Put on a stream's request queue: the stream ends.
CLOSE = object()


@dataclass(frozen=True, slots=True)
class Batch:
    """What one CropBatch carries out."""

    crops: list[analytics_pb2.Crop]
    events: list[QueuedEvent]
    snapshots: list[events_pb2.Snapshot]

    @property
    def empty(self) -> bool:
        return not (self.crops or self.events or self.snapshots)


@dataclass(slots=True)
class CropPending:
    crop: analytics_pb2.Crop
    sent: float
    probe: bool


@dataclass(frozen=True, slots=True)
class QueuedEvent:
    """A track event waiting for its final ack, and its place: its spool row (with a
    spool; increasing in the order offered), else a counter."""

    event: events_pb2.TrackEvent
    order: int


@dataclass(slots=True)
class EventPending:
    ev: QueuedEvent
    sent: float
    probe: bool


@dataclass(slots=True)
class SnapPending:
    snap: events_pb2.Snapshot
    sent: float
    probe: bool


@dataclass(eq=False)
class UplinkStream:
    call: Any
    requests: queue.SimpleQueue[Any]
    opened: float
    pending: dict[str, CropPending] = field(default_factory=dict)
    # Track events in flight by idempotency key (a replayed event may be there twice).
    events: dict[str, list[EventPending]] = field(default_factory=dict)
    # Track snapshots in flight by snapshot id.
    snapshots: dict[str, SnapPending] = field(default_factory=dict)
    draining: bool = False  # past its age: no new batches; closed once its acks are in


class UplinkParts:
    """The state the uplink's halves share (edge/uplink/stream.py's `Uplink` sets it): its
    config, metrics, breaker, lock, streams, and each payload's buffer and the spool."""

    target: str
    cfg: UplinkConfig
    metrics: EdgeMetrics
    breaker: CircuitBreaker
    _spool: CropSpool | None
    _cond: threading.Condition
    _stop: threading.Event
    _streams: list[UplinkStream]
    _retry_until: float
    _buf: deque[analytics_pb2.Crop]
    _snaps: SnapshotQueue
    _evbuf: deque[QueuedEvent]
    _ev_loaded: int
    _ev_unloaded: int
    _ev_order: int
    _ev_in_hand: int
    _ev_hold: dict[str, float]
    _events_paused_until: float

    if TYPE_CHECKING:
        # Each defined by one half, called by others.

        def _gauges(self) -> None: ...

        def _dropped(self, reason: str, n: int) -> None: ...

        def _events_dropped(self, reason: str, n: int) -> None: ...

        def _requeue(self, crops: list[analytics_pb2.Crop]) -> None: ...

        def _requeue_events(self, events: list[QueuedEvent]) -> None: ...

        def _unacked_events(self, streams: list[UplinkStream]) -> list[EventPending]: ...

        def offer(self, crops: list[analytics_pb2.Crop]) -> None: ...

        def offer_events(self, events: list[events_pb2.TrackEvent]) -> None: ...

        def offer_snapshots(self, snaps: list[events_pb2.Snapshot]) -> None: ...
