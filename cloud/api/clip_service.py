"""Event clips on the Analytics service: UploadClip stores them, GetClip serves them.

Each chunk is checked (clip_checks: version, ids, the size cap, a final chunk's info) and
written in a transaction of its own (clip_rows) before its ack, one ack per chunk in order:
STORED with the committed size once committed (a resend: the same, nothing changed;
`complete` once the final chunk is), RETRY with the committed size for a chunk past it (the
device goes back there), RETRY with the chunk's own offset and a hint when the store is
busy or down (send it again; should less be committed, that answer says so), INVALID with
the reason for what cannot become a stored clip. Every refusal is counted and logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import (
    ProtocolVersionError,
    check_version,
    clips_pb2,
    current_version,
)

from ..metrics import CloudMetrics
from ..store.clip_reader import ClipGoneError, ClipSpan, clip_bytes
from ..store.clip_rows import ClipLookupError, ClipQuery, ClipRow, ClipWrite
from ..store.event_store import StoreError
from .clip_checks import check_chunk
from .service_parts import ServiceParts

log = logging.getLogger(__name__)

UPLOAD, GET_CLIP = "UploadClip", "GetClip"
C = clips_pb2
_STATUS: dict[int, str] = {
    C.CLIP_CHUNK_STATUS_INVALID: "invalid",
    C.CLIP_CHUNK_STATUS_RETRY: "retry",
}


def outcome_name(outcome: int) -> str:
    """`complete`, `cut_short`...: a ClipOutcome as metrics and pages name it."""
    return C.ClipOutcome.Name(outcome).removeprefix("CLIP_OUTCOME_").lower()  # type: ignore[arg-type]


class Clips:
    """The clip part of the service (crops: service.AnalyticsService)."""

    def __init__(self, cfg: CloudConfig, parts: ServiceParts, metrics: CloudMetrics) -> None:
        self.cfg = cfg.clips
        self.store = parts.store
        self.drops = parts.drops
        self.executor = parts.executor
        self.metrics = metrics
        self.retry_ms = cfg.batcher.retry_after_ms
        # Chunks being written, all streams together (each holds a store connection).
        self._writers = asyncio.Semaphore(cfg.clips.max_writers)

    # UploadClip

    async def upload(
        self, chunks: AsyncIterator[clips_pb2.ClipChunk]
    ) -> AsyncIterator[clips_pb2.ClipChunkAck]:
        """One ack per chunk, in order, each after its chunk's fate is committed."""
        async for chunk in chunks:
            yield self._ack(chunk, await self._store(chunk))

    async def _store(self, chunk: clips_pb2.ClipChunk) -> ClipWrite:
        self.metrics.clip_chunks_received.inc()
        bad = check_chunk(chunk, self.cfg.max_bytes)
        if bad is not None:
            return ClipWrite(C.CLIP_CHUNK_STATUS_INVALID, 0, str(bad), bad.code)
        if self._writers.locked():
            return self._again(chunk, "busy", f"{self.cfg.max_writers} clip chunks being written")
        async with self._writers:
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(self.executor, self.store.append_clip, chunk)
            except StoreError as exc:
                return self._again(chunk, "store_error", str(exc))
            except Exception as exc:  # a bug still answers the chunk instead of ending the stream
                log.exception("clip chunk of %s failed", chunk.info.clip_id)
                return self._again(chunk, "internal", str(exc))

    @staticmethod
    def _again(chunk: clips_pb2.ClipChunk, code: str, why: str) -> ClipWrite:
        # Not stored now: send this chunk again (a gap RETRY corrects the offset if less
        # is committed than the device thinks).
        return ClipWrite(C.CLIP_CHUNK_STATUS_RETRY, chunk.offset, f"{code}: {why}", code)

    def _ack(self, chunk: clips_pb2.ClipChunk, got: ClipWrite) -> clips_pb2.ClipChunkAck:
        info, m = chunk.info, self.metrics
        after_ms = 0
        if got.code:
            m.clip_chunks_refused.labels(_STATUS[got.status], got.code).inc()
            self.drops(
                UPLOAD,
                f"clip_{got.code}",
                f"clip {info.clip_id!r} of camera {info.camera_id!r} at {chunk.offset}: "
                f"{got.reason}",
            )
            # A gap is answered at once (the device goes back); busy and down wait.
            if got.status == C.CLIP_CHUNK_STATUS_RETRY and got.code != "gap":
                after_ms = self.retry_ms
        else:
            self._stored(chunk, got)
        return clips_pb2.ClipChunkAck(
            clip_id=info.clip_id,
            status=got.status,  # type: ignore[arg-type]
            committed_bytes=got.committed,
            reason=got.reason,
            retry_after_ms=after_ms,
            complete=got.complete,
        )

    def _stored(self, chunk: clips_pb2.ClipChunk, got: ClipWrite) -> None:
        m, camera = self.metrics, chunk.info.camera_id
        m.ok(UPLOAD)
        if got.started:  # an empty first chunk (a device asking where to resume) too
            m.clips_started.labels(camera).inc()
        if not got.appended and not got.finished and not got.started:
            m.clip_chunks_resent.inc()
            return
        m.camera_clip_bytes.labels(camera).inc(got.appended)
        if got.cut:
            m.clip_bytes_cut_back.labels(camera).inc(got.cut)
            log.info(
                "clip %s cut back by the device to %d bytes: %d stored bytes past it dropped",
                chunk.info.clip_id,
                got.committed,
                got.cut,
            )
        if got.finished:
            m.clips_stored.labels(outcome_name(chunk.info.outcome)).inc()
            log.info(
                "clip %s stored: %d bytes, %s%s",
                chunk.info.clip_id,
                got.committed,
                outcome_name(chunk.info.outcome),
                f" ({chunk.info.reason})" if chunk.info.reason else "",
            )

    # GetClip

    async def _find(
        self, request: clips_pb2.GetClipRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> ClipRow:
        status: tuple[grpc.StatusCode, str, str] | None = None
        found: ClipRow | None = None
        try:
            check_version(request.version)
            q = ClipQuery(request.clip_id, request.event_key, request.camera_id, request.track_uid)
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(self.executor, self.store.find_clip, q)
        except ProtocolVersionError as exc:
            status = (grpc.StatusCode.FAILED_PRECONDITION, "protocol_version", str(exc))
        except ClipLookupError as exc:
            status = (grpc.StatusCode.INVALID_ARGUMENT, "bad_request", str(exc))
        except StoreError as exc:
            status = (grpc.StatusCode.UNAVAILABLE, "store_error", f"event store: {exc}")
        if status is None and found is None:
            status = (grpc.StatusCode.NOT_FOUND, "not_found", "no clip stored")
        if status is not None:
            self.drops(GET_CLIP, status[1], status[2])
            await context.abort(status[0], status[2])
        assert found is not None
        return found

    async def get(
        self, request: clips_pb2.GetClipRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[clips_pb2.ClipChunk]:
        """The clip's committed bytes in order, `last` on the end of a final clip."""
        found = await self._find(request, context)
        info, total = found.info, found.committed_bytes
        version = current_version()
        if total == 0:  # a clip with no bytes (no keyframe, a codec MP4 cannot hold)
            yield clips_pb2.ClipChunk(version=version, info=info, last=found.final)
            return
        span = ClipSpan(info.clip_id, 0, total, self.cfg.serve_chunk_bytes)
        try:
            async for offset, data in clip_bytes(self.store, self.executor, span):
                last = found.final and offset + len(data) == total
                yield clips_pb2.ClipChunk(
                    version=version, info=info, offset=offset, data=data, last=last
                )
        except (ClipGoneError, StoreError) as exc:
            gone = isinstance(exc, ClipGoneError)
            self.drops(GET_CLIP, "gone" if gone else "store_error", str(exc))
            code = grpc.StatusCode.NOT_FOUND if gone else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, str(exc))
        self.metrics.ok(GET_CLIP)
