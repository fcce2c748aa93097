"""The Analytics gRPC service: Uplink, Classify, QueryEvents, WatchEvents (on grpc.aio); the
track events of Uplink, QueryTrackEvents and WatchTrackEvents are track_service's, the
snapshots of Uplink and GetSnapshot snapshot_service's, UploadClip and GetClip clip_service's.

Handlers are coroutines on the server's one event loop, so an idle or slow stream costs a
suspended coroutine, not a thread, and cannot starve other calls. Anything that blocks (the
store, a large decode) runs on a thread pool; the batcher and the store answer through
concurrent futures whose callbacks hand results back to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
import numpy as np
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import (
    ProtocolVersionError,
    analytics_pb2,
    analytics_pb2_grpc,
    check_version,
    clips_pb2,
    current_version,
    events_pb2,
)

from ..classify.batcher import BatcherClosedError, DeadlineExpiredError, QueueFullError, Scored
from ..classify.images import ImageLimits, InvalidImageError, decode, to_model_size
from ..metrics import CloudMetrics
from ..store.event_store import EventQuery, PageKey, StoreBusyError, Stored, StoreError
from ..store.track_filter import parse_track_uid
from .batch_acks import BatchAcks
from .clip_service import Clips
from .identity_service import SimilarTracks
from .item_acks import ItemAcks, Refusal
from .request_version import require_version
from .service_parts import ServiceParts
from .snapshot_service import Snapshots
from .store_pages import store_pages
from .track_service import TrackEvents
from .watch import watched

log = logging.getLogger(__name__)

RETRY_AFTER_KEY = "retry-after-ms"
_DEADLINE_SLACK_S = 0.05
# Larger images decode on the thread pool, so one big request cannot stall the event loop.
_INLINE_DECODE_BYTES = 64 * 1024
UPLINK, CLASSIFY, QUERY, WATCH = "Uplink", "Classify", "QueryEvents", "WatchEvents"
_REFUSED = {
    Refusal.INVALID: analytics_pb2.CROP_STATUS_INVALID,
    Refusal.RETRY: analytics_pb2.CROP_STATUS_RETRY,
}


@dataclass(frozen=True, slots=True)
class _Abort:
    """Ends an Uplink stream with a status (raised from the handler thread)."""

    code: grpc.StatusCode
    message: str


class CropAcks(ItemAcks[analytics_pb2.Crop]):
    """How a crop is named and refused (its STORED ack carries its labels: _stored_ack)."""

    what, code_prefix = "crop", ""

    def key(self, item: analytics_pb2.Crop) -> str:
        return item.crop_id

    def ack(
        self,
        acks: BatchAcks,
        i: int,
        item: analytics_pb2.Crop,
        refusal: Refusal,
        reason: str,
        after_ms: int = 0,
    ) -> None:
        status = _REFUSED[refusal]
        acks.set(
            i,
            analytics_pb2.CropAck(
                crop_id=item.crop_id, status=status, reason=reason, retry_after_ms=after_ms
            ),
        )


class AnalyticsService(analytics_pb2_grpc.AnalyticsServicer):  # type: ignore[misc]
    """Request handling; the batcher computes, the store persists, the hub fans out."""

    def __init__(self, cfg: CloudConfig, parts: ServiceParts, metrics: CloudMetrics) -> None:
        self.cfg = cfg
        self.executor = parts.executor
        self.batcher = parts.batcher
        self.store = parts.store
        self.hub = parts.hub
        self.metrics = metrics
        self.drops = parts.drops
        lim = cfg.limits
        self.image_limits = ImageLimits(
            lim.max_image_width, lim.max_image_height, lim.max_image_pixels
        )
        self.answers = CropAcks(parts.drops, metrics, cfg.batcher.retry_after_ms)
        self.tracks = TrackEvents(cfg, parts, metrics)
        self.snapshots = Snapshots(cfg, parts, metrics)
        self.clips = Clips(cfg, parts, metrics)
        self.similar = SimilarTracks(cfg.identity, parts, metrics)

    # helpers

    @staticmethod
    def _deadline(context: grpc.aio.ServicerContext[Any, Any]) -> tuple[float | None, float | None]:
        """(remaining seconds, monotonic deadline), both None when the call has no deadline."""
        remaining = context.time_remaining()
        if remaining is None or remaining > 1e8:  # gRPC reports "no deadline" as ~infinity
            return None, None
        return float(remaining), time.monotonic() + float(remaining)

    def _image(self, data: bytes, encoding: int, width: int, height: int) -> np.ndarray:
        # A version switch keeps the input size (cloud/classify/versions.py).
        size = self.batcher.classifier.size
        return to_model_size(decode(data, encoding, width, height, self.image_limits, size), size)

    # Uplink

    async def Uplink(  # noqa: N802
        self,
        request_iterator: AsyncIterator[analytics_pb2.CropBatch],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[analytics_pb2.UplinkResponse]:
        """Crop batches in, one ack per crop and per track event out; several batches are
        worked on at once (a batch's track events reach the store in the order they came)."""
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[analytics_pb2.UplinkResponse | _Abort | BaseException | None] = (
            asyncio.Queue()
        )
        window_size = self.cfg.limits.max_inflight_batches
        window = asyncio.Semaphore(window_size)
        _, deadline = self._deadline(context)

        def send(resp: analytics_pb2.UplinkResponse) -> None:  # from batcher or store threads
            loop.call_soon_threadsafe(out.put_nowait, resp)

        def release() -> None:
            loop.call_soon_threadsafe(window.release)

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    await window.acquire()
                    # One hop to a thread per batch: the duplicate lookup reads the store.
                    abort = await loop.run_in_executor(
                        self.executor, self._start_batch, batch, deadline, send, release
                    )
                    if abort is not None:
                        out.put_nowait(abort)
                        return
                # Acks of batches in flight still go out before the stream closes.
                for _ in range(window_size):
                    await window.acquire()
                out.put_nowait(None)
            except grpc.aio.AbortError as exc:  # a body that did not parse: status already set
                out.put_nowait(exc)
            except Exception as exc:
                log.exception("uplink stream failed")
                out.put_nowait(_Abort(grpc.StatusCode.INTERNAL, f"uplink failed: {exc}"))

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await out.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, _Abort):
                    await context.abort(item.code, item.message)
                    return
                yield item
        finally:
            reader.cancel()

    def _start_batch(
        self,
        batch: analytics_pb2.CropBatch,
        deadline: float | None,
        send: Callable[[analytics_pb2.UplinkResponse], None],
        release: Callable[[], None],
    ) -> _Abort | None:
        try:
            check_version(batch.version)
        except ProtocolVersionError as exc:
            self.drops(UPLINK, "protocol_version", str(exc))
            release()
            return _Abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        n = len(batch.crops)
        if n == 0 and not batch.events and not batch.snapshots:
            release()
            return None
        acks = BatchAcks(n, len(batch.events), send, release, len(batch.snapshots))
        # Handed to the store now, on this thread: the next batch waits, so order holds;
        # snapshots first, so an event naming one commits with or after it.
        self.snapshots.start(list(batch.snapshots), acks)
        self.tracks.start(list(batch.events), acks)
        limit = self.cfg.limits.max_crops_per_batch
        if n > limit:
            reason = f"too_many_crops: batch has {n} crops; the limit is {limit}"
            for i, crop in enumerate(batch.crops):
                self.answers.invalid(i, crop, acks, "too_many_crops", reason)
            return None
        for i, crop in enumerate(batch.crops):
            self.answers.guarded(i, crop, acks, partial(self._start_crop, i, crop, acks, deadline))
        return None

    def _start_crop(
        self, i: int, crop: analytics_pb2.Crop, acks: BatchAcks, deadline: float | None
    ) -> None:
        if not crop.crop_id:
            self.answers.invalid(i, crop, acks, "no_crop_id", "no_crop_id: crop_id is empty")
            return
        try:
            existing = self.store.find(crop.edge_id, crop.crop_id)
        except StoreError as exc:
            self.answers.retry(i, crop, acks, "store_error", f"store_error: {exc}")
            return
        if existing is not None:
            self.metrics.crops_duplicate.inc()
            self.metrics.ok(UPLINK)
            acks.set(i, self._stored_ack(crop.crop_id, existing, None))
            return
        self.metrics.camera_crop_bytes.labels(crop.camera_id).inc(len(crop.image))
        try:
            img = self._image(crop.image, crop.encoding, crop.width, crop.height)
        except InvalidImageError as exc:
            self.answers.invalid(i, crop, acks, exc.reason, f"{exc.reason}: {exc}")
            return
        try:
            fut = self.batcher.submit(img, deadline, crop.camera_id)
        except QueueFullError as exc:
            self.answers.retry(
                i, crop, acks, "queue_full", f"queue_full: {exc}", exc.retry_after_ms
            )
            return
        except BatcherClosedError as exc:
            self.answers.retry(i, crop, acks, "shutting_down", f"shutting_down: {exc}")
            return
        fut.add_done_callback(
            lambda f: self.answers.guarded(
                i, crop, acks, partial(self._classified, i, crop, acks, f)
            )
        )

    def _classified(
        self, i: int, crop: analytics_pb2.Crop, acks: BatchAcks, fut: Future[Scored]
    ) -> None:
        exc = fut.exception()
        if exc is not None:
            reason = (
                "deadline"
                if isinstance(exc, DeadlineExpiredError)
                else "shutting_down"
                if isinstance(exc, BatcherClosedError)
                else "model_error"
            )
            self.answers.retry(i, crop, acks, reason, f"{reason}: {exc}")
            return
        scored = fut.result()
        top = scored.classifier.top_k(scored.probs, self.cfg.model.top_k)
        version = scored.classifier.version
        # The classifier judges the detector's label; the event keeps that label untouched.
        judged = scored.classifier.judge(crop.detection.label, scored.probs)
        event = analytics_pb2.Event(
            edge_id=crop.edge_id,
            camera_id=crop.camera_id,
            sequence=crop.sequence,
            capture_ns=crop.timing.capture_ns,
            edge_detection=crop.detection,
            label=top[0].label,
            score=top[0].score,
            crop_id=crop.crop_id,
            track_id=crop.track_id or crop.detection.track_id,
            model_version=version,
            verdict=judged.verdict,
            model=scored.classifier.name,
            support=judged.support,
        )
        try:
            sfut = self.store.submit(event)
        except StoreBusyError as exc:
            self.answers.retry(i, crop, acks, "store_busy", f"store_busy: {exc}")
            return
        stored = partial(self._stored, i, crop, acks)
        sfut.add_done_callback(
            lambda f: self.answers.guarded(i, crop, acks, partial(stored, f, top, version))
        )

    def _stored(
        self,
        i: int,
        crop: analytics_pb2.Crop,
        acks: BatchAcks,
        fut: Future[Stored],
        top: list[analytics_pb2.LabelScore],
        version: int,
    ) -> None:
        crop_id = crop.crop_id
        exc = fut.exception()
        if exc is not None:
            self.answers.retry(i, crop, acks, "store_error", f"store_error: {exc}")
            return
        stored = fut.result()
        if stored.duplicate:
            self.metrics.crops_duplicate.inc()
        else:
            self.metrics.camera_events.labels(stored.event.camera_id).inc()
            self.metrics.camera_stored_bytes.labels(stored.event.camera_id).inc(
                stored.event.ByteSize()
            )
        self.metrics.ok(UPLINK)
        acks.set(
            i, self._stored_ack(crop_id, stored.event, None if stored.duplicate else top, version)
        )

    @staticmethod
    def _stored_ack(
        crop_id: str,
        ev: analytics_pb2.Event,
        top: list[analytics_pb2.LabelScore] | None,
        version: int = 0,
    ) -> analytics_pb2.CropAck:
        labels = (
            top if top is not None else [analytics_pb2.LabelScore(label=ev.label, score=ev.score)]
        )
        return analytics_pb2.CropAck(
            crop_id=crop_id,
            status=analytics_pb2.CROP_STATUS_STORED,
            event_id=ev.event_id,
            labels=labels,
            model_version=version if top is not None else 0,
            verdict=ev.verdict,
        )

    # Classify

    async def Classify(  # noqa: N802
        self,
        request: analytics_pb2.ClassifyRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> analytics_pb2.ClassifyResponse:
        """One image, classified through the shared batcher."""
        await require_version(request.version, CLASSIFY, self.drops, context)
        args = (request.image, request.encoding, request.width, request.height)
        try:
            if len(request.image) <= _INLINE_DECODE_BYTES:
                img = self._image(*args)  # a crop decodes in well under a millisecond
            else:
                img = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self._image, *args
                )
        except InvalidImageError as exc:
            self.drops(CLASSIFY, exc.reason, str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{exc.reason}: {exc}")
        remaining, deadline = self._deadline(context)
        if remaining is not None and remaining <= 0:
            self.drops(CLASSIFY, "deadline", "deadline passed before the request was queued")
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed; not computed")
        try:
            fut = self.batcher.submit(img, deadline)
        except QueueFullError as exc:
            self.drops(CLASSIFY, "queue_full", str(exc))
            context.set_trailing_metadata(((RETRY_AFTER_KEY, str(exc.retry_after_ms)),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except BatcherClosedError as exc:
            self.drops(CLASSIFY, "shutting_down", str(exc))
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        status: tuple[grpc.StatusCode, str, str] | None = None
        try:
            # Cancelling the wrapper (client gone, deadline) cancels the batcher's future,
            # so the batcher skips the image instead of computing it.
            scored = await asyncio.wait_for(asyncio.wrap_future(fut), remaining)
        except TimeoutError:
            status = (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", "deadline passed in queue")
        except DeadlineExpiredError as exc:
            status = (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline", str(exc))
        except asyncio.CancelledError:
            # gRPC cancels the handler when the client cancels or its deadline passes; the
            # client's own timer usually fires a little before the server's, hence the slack.
            left = context.time_remaining()
            if deadline is not None and (left is None or left <= _DEADLINE_SLACK_S):
                self.drops(CLASSIFY, "deadline", "deadline passed in queue")
            else:
                self.drops(CLASSIFY, "cancelled", "the client cancelled")
            raise
        except BatcherClosedError as exc:
            status = (grpc.StatusCode.UNAVAILABLE, "shutting_down", str(exc))
        except Exception as exc:
            status = (grpc.StatusCode.INTERNAL, "model_error", f"model failed: {exc}")
        if status is not None:
            self.drops(CLASSIFY, status[1], status[2])
            await context.abort(status[0], status[2])
        self.metrics.ok(CLASSIFY)
        return analytics_pb2.ClassifyResponse(
            version=current_version(),
            labels=scored.classifier.top_k(scored.probs, request.top_k or self.cfg.model.top_k),
            model=scored.classifier.name,
            model_version=scored.classifier.version,
        )

    # queries

    async def QueryEvents(  # noqa: N802
        self,
        request: analytics_pb2.QueryEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[analytics_pb2.QueryEventsResponse]:
        """Pages of stored events, oldest first; each page carries the token of the next."""
        await require_version(request.version, QUERY, self.drops, context)
        if request.end_ns and request.end_ns < request.start_ns:
            self.drops(QUERY, "bad_range", f"end_ns {request.end_ns} < start_ns")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "end_ns is before start_ns")
        after: PageKey | None = None
        if request.page_token:
            try:
                after = PageKey.parse(request.page_token)
            except ValueError as exc:
                self.drops(QUERY, "bad_page_token", str(exc))
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if request.track_uid:
            try:
                parse_track_uid(request.track_uid)
            except ValueError as exc:
                self.drops(QUERY, "bad_request", str(exc))
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        lim = self.cfg.limits
        size = min(request.page_size or lim.default_page_size, lim.max_page_size)
        q = EventQuery(
            request.camera_id,
            request.label,
            request.start_ns,
            request.end_ns,
            request.group_by_track,
            request.track_id,
            request.track_uid,
        )

        def fetch(key: PageKey | None) -> tuple[list[analytics_pb2.Event], PageKey | None]:
            return self.store.query(q, key, size)

        async for events, key in store_pages(
            fetch, after, self.executor, QUERY, self.drops, context
        ):
            yield analytics_pb2.QueryEventsResponse(
                version=current_version(),
                events=events,
                next_page_token=key.token() if key else "",
            )
        self.metrics.ok(QUERY)

    async def WatchEvents(  # noqa: N802
        self,
        request: analytics_pb2.WatchEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[analytics_pb2.Event]:
        """New events as they are committed, until the client goes away."""
        await require_version(request.version, WATCH, self.drops, context)
        r = request
        sub = partial(self.hub.subscribe, r.camera_id, r.label, r.track_id, r.track_uid)
        async for ev in watched(sub, self.hub, context, WATCH, self.drops):
            yield ev
        self.metrics.ok(WATCH)

    # track events (track_service)

    async def QueryTrackEvents(  # noqa: N802
        self,
        request: analytics_pb2.QueryEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[events_pb2.QueryTrackEventsResponse]:
        """Pages of stored track events, oldest first, with their track's verdict."""
        async for page in self.tracks.query(request, context):
            yield page

    async def WatchTrackEvents(  # noqa: N802
        self,
        request: analytics_pb2.WatchEventsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[events_pb2.StoredTrackEvent]:
        """New track events as they are committed, until the client goes away."""
        async for ev in self.tracks.watch(request, context):
            yield ev

    # snapshots (snapshot_service)

    async def GetSnapshot(  # noqa: N802
        self,
        request: analytics_pb2.GetSnapshotRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> analytics_pb2.GetSnapshotResponse:
        """A track's stored snapshot JPEG."""
        return await self.snapshots.get(request, context)

    # clips (clip_service)

    async def UploadClip(  # noqa: N802
        self,
        request_iterator: AsyncIterator[clips_pb2.ClipChunk],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[clips_pb2.ClipChunkAck]:
        """A device's clip chunks in, one ack per chunk out after it is committed."""
        async for ack in self.clips.upload(request_iterator):
            yield ack

    async def GetClip(  # noqa: N802
        self,
        request: clips_pb2.GetClipRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[clips_pb2.ClipChunk]:
        """A stored clip's bytes, in chunks."""
        async for chunk in self.clips.get(request, context):
            yield chunk

    # search by example (identity_service)

    async def SearchSimilar(  # noqa: N802
        self,
        request: analytics_pb2.SearchSimilarRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> analytics_pb2.SearchSimilarResponse:
        """The stored tracks most like one track, best first."""
        return await self.similar.search(request, context)
