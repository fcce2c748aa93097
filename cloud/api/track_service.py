"""Track events on the Analytics service: taken from Uplink batches, served by
QueryTrackEvents and WatchTrackEvents.

An event from an edge is checked (track_checks), handed to the store's writer in the order it
came, and acked only from the writer's answer: STORED after its transaction committed,
DUPLICATE when its idempotency key was stored before (by any replica), INVALID (final, with
the reason; counted and logged) for bad input, RETRY with a hint when the store is busy or
down. Once one of a camera's events in a batch gets RETRY at hand-over, the camera's later
events in that batch get RETRY too, so a resend cannot store them ahead of it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import grpc
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import (
    analytics_pb2,
    current_version,
    events_pb2,
)

from ..metrics import CloudMetrics
from ..store.event_store import StoredTrack
from ..store.track_filter import TrackPageKey, TrackQuery, parse_track_uid, type_name
from .batch_acks import BatchAcks
from .item_acks import Refusal, StoredItemAcks
from .request_version import require_version
from .service_parts import ServiceParts
from .store_pages import store_pages
from .track_checks import check_event
from .watch import watched

log = logging.getLogger(__name__)

UPLINK, QUERY_TRACKS, WATCH_TRACKS = "Uplink", "QueryTrackEvents", "WatchTrackEvents"
_S = events_pb2


_REFUSED = {
    Refusal.INVALID: _S.TRACK_EVENT_STATUS_INVALID,
    Refusal.RETRY: _S.TRACK_EVENT_STATUS_RETRY,
}


class EventAcks(StoredItemAcks[events_pb2.TrackEvent, StoredTrack]):
    """How a track event is named, counted and acked."""

    what, code_prefix = "track event", "event_"

    def key(self, item: events_pb2.TrackEvent) -> str:
        return item.idempotency_key

    def count(self, item: events_pb2.TrackEvent, refusal: Refusal, code: str) -> None:
        if refusal is Refusal.INVALID:
            self.metrics.track_events_invalid.labels(type_name(item.type), code).inc()
        else:
            self.metrics.track_events_retry.labels(type_name(item.type)).inc()

    def ack(
        self,
        acks: BatchAcks,
        i: int,
        item: events_pb2.TrackEvent,
        refusal: Refusal,
        reason: str,
        after_ms: int = 0,
    ) -> None:
        acks.set_event(i, _ack(item.idempotency_key, _REFUSED[refusal], reason, after_ms))

    def ack_stored(
        self, acks: BatchAcks, i: int, item: events_pb2.TrackEvent, got: StoredTrack
    ) -> None:
        name = type_name(item.type)
        if got.duplicate:
            self.metrics.track_events_duplicate.labels(name).inc()
            status = _S.TRACK_EVENT_STATUS_DUPLICATE
        else:
            self.metrics.track_events_stored.labels(name).inc()
            status = _S.TRACK_EVENT_STATUS_STORED
        acks.set_event(i, _ack(item.idempotency_key, status, stored_id=got.stored.stored_id))


def _ack(
    key: str, status: int, reason: str = "", after_ms: int = 0, stored_id: int = 0
) -> events_pb2.TrackEventAck:
    return events_pb2.TrackEventAck(
        idempotency_key=key,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        retry_after_ms=after_ms,
        stored_id=stored_id,
    )


class TrackEvents:
    """The track-event half of the service (the crop half is service.AnalyticsService)."""

    def __init__(self, cfg: CloudConfig, parts: ServiceParts, metrics: CloudMetrics) -> None:
        self.cfg = cfg
        self.store = parts.store
        self.hub = parts.hub
        self.drops = parts.drops
        self.executor = parts.executor
        self.metrics = metrics
        self.answers = EventAcks(parts.drops, metrics, cfg.batcher.retry_after_ms)

    # Uplink

    def start(self, events: list[events_pb2.TrackEvent], acks: BatchAcks) -> None:
        """Check and hand over a batch's events in order (on a request thread); each is acked
        through `acks` when its fate is known."""
        limit = self.cfg.limits.max_events_per_batch
        if len(events) > limit:
            reason = f"too_many_events: batch has {len(events)} track events; the limit is {limit}"
            for j, ev in enumerate(events):
                self.answers.invalid(j, ev, acks, "too_many_events", reason)
            return
        held: dict[str, str] = {}  # camera -> why its earlier event got RETRY
        for j, ev in enumerate(events):
            self.answers.guarded(j, ev, acks, partial(self._start_one, j, ev, acks, held))

    def _start_one(
        self, j: int, ev: events_pb2.TrackEvent, acks: BatchAcks, held: dict[str, str]
    ) -> None:
        self.metrics.track_events_received.labels(type_name(ev.type)).inc()
        bad = check_event(ev, self.cfg.limits.max_event_bytes, self.cfg.identity.dim)
        if bad is not None:
            self.answers.invalid(j, ev, acks, bad.code, str(bad))
            return
        if ev.camera_id in held:
            self.answers.retry(j, ev, acks, "held", f"held: {held[ev.camera_id]}")
            return
        if not self.answers.submit(j, ev, acks, self.store.submit_track):
            held[ev.camera_id] = f"an earlier event of camera {ev.camera_id} got RETRY"

    # queries

    @staticmethod
    def _filter(
        req: analytics_pb2.QueryEventsRequest | analytics_pb2.WatchEventsRequest,
        start_ns: int = 0,
        end_ns: int = 0,
    ) -> TrackQuery:
        """The request's filter; ValueError for a malformed track_uid."""
        if req.track_uid:
            parse_track_uid(req.track_uid)
        return TrackQuery(
            camera_id=req.camera_id,
            label=req.label,
            start_ns=start_ns,
            end_ns=end_ns,
            types=tuple(int(t) for t in req.types),
            zone=req.zone,
            line=req.line,
            rule=req.rule,
            track_id=req.track_id,
            track_uid=req.track_uid,
            identity_id=getattr(req, "identity_id", 0),
        )

    async def query(
        self,
        request: analytics_pb2.QueryEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[events_pb2.QueryTrackEventsResponse]:
        """Pages of stored track events, oldest first ((capture_ns, sequence, stored_id)
        order), each with its track's verdict and the token of the next page."""
        await require_version(request.version, QUERY_TRACKS, self.drops, context)
        if request.end_ns and request.end_ns < request.start_ns:
            self.drops(QUERY_TRACKS, "bad_range", f"end_ns {request.end_ns} < start_ns")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "end_ns is before start_ns")
        after: TrackPageKey | None = None
        try:
            q = self._filter(request, request.start_ns, request.end_ns)
            if request.page_token:
                after = TrackPageKey.parse(request.page_token)
        except ValueError as exc:
            self.drops(QUERY_TRACKS, "bad_request", str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        lim = self.cfg.limits
        size = min(request.page_size or lim.default_page_size, lim.max_page_size)

        def fetch(
            key: TrackPageKey | None,
        ) -> tuple[list[events_pb2.StoredTrackEvent], TrackPageKey | None]:
            return self.store.query_tracks(q, key, size)

        async for events, key in store_pages(
            fetch, after, self.executor, QUERY_TRACKS, self.drops, context
        ):
            yield events_pb2.QueryTrackEventsResponse(
                version=current_version(),
                events=events,
                next_page_token=key.token() if key else "",
            )
        self.metrics.ok(QUERY_TRACKS)

    async def watch(
        self,
        request: analytics_pb2.WatchEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[events_pb2.StoredTrackEvent]:
        """New track events as they are committed (by any replica), until the client goes."""
        await require_version(request.version, WATCH_TRACKS, self.drops, context)
        try:
            q = self._filter(request)
        except ValueError as exc:
            self.drops(WATCH_TRACKS, "bad_request", str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        sub = partial(self.hub.subscribe_tracks, q)
        async for ev in watched(sub, self.hub, context, WATCH_TRACKS, self.drops):
            yield ev
        self.metrics.ok(WATCH_TRACKS)
