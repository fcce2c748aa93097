"""Decoding the frames of a batch in the worker pool, just before they are letterboxed.

Only frames taken for a batch are decoded. A payload that passed ingest's checks and still
does not decode is dropped here: counted by reason, logged (rate-limited) and handed to
`on_reject` so the node can give its sender a final answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from strata.edge.inference.h264 import H264Decoders, H264Error
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.shared.contracts import common_pb2
from strata.shared.imagecheck import InvalidImageError
from strata.shared.logs import RateLimitedLog

log = logging.getLogger(__name__)

RejectHook = Callable[[QueuedFrame, str, str], None]


class FrameDecoder:
    """Decodes batches, on `threads` threads when more than one (cv2 frees the GIL)."""

    def __init__(
        self,
        metrics: EdgeMetrics,
        threads: int = 1,
        on_reject: RejectHook | None = None,
        h264: H264Decoders | None = None,
    ) -> None:
        self.metrics = metrics
        self.on_reject = on_reject
        # H.264 frames decode here, in order, one stream at a time (references between
        # frames); the pool takes the independent JPEG ones.
        self.h264 = h264 or H264Decoders()
        self._pool = ThreadPoolExecutor(threads, "edge-decode") if threads > 1 else None
        self._log = RateLimitedLog(log)

    def decode(self, frames: Sequence[QueuedFrame]) -> list[DecodedFrame]:
        """The frames that decode, in order; the others are dropped with a reason."""
        results: list[DecodedFrame | InvalidImageError]
        # One frame, or nothing for the pool (raw BGR is a view; H.264 decodes in order on
        # this thread): no hand-off.
        pooled = [i for i, f in enumerate(frames) if _encoded(f)]
        if self._pool is None or len(frames) == 1 or not pooled:
            results = [self._decode(f) for f in frames]
        else:
            futures = {i: self._pool.submit(_decode, frames[i]) for i in pooled}
            results = [
                futures[i].result() if i in futures else self._decode(f)
                for i, f in enumerate(frames)
            ]
        out: list[DecodedFrame] = []
        for frame, res in zip(frames, results, strict=True):
            if isinstance(res, DecodedFrame):
                out.append(res)
                continue
            self.metrics.drops.labels(res.reason).inc()
            h = frame.header
            self._log.warn(
                res.reason,
                "dropped frame camera=%r seq=%d at decode (%s): %s",
                h.camera_id,
                h.sequence,
                res.reason,
                res,
            )
            if self.on_reject is not None:
                self.on_reject(frame, res.reason, str(res))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def _decode(self, frame: QueuedFrame) -> DecodedFrame | InvalidImageError:
        h = frame.header
        if h.encoding != common_pb2.ENCODING_H264:
            return _decode(frame)
        try:
            image = self.h264.decode(
                h.session_id,
                h.camera_id,
                h.sequence,
                h.stream_index,
                frame.payload,
                h.keyframe,
                h.width,
                h.height,
            )
        except H264Error as exc:
            return InvalidImageError(exc.reason, exc.detail)
        return DecodedFrame(frame, image)


def _encoded(frame: QueuedFrame) -> bool:
    # H.264 is encoded too, but its streams are decoded in order on the calling thread.
    return frame.header.encoding == common_pb2.ENCODING_JPEG


def _decode(frame: QueuedFrame) -> DecodedFrame | InvalidImageError:
    try:
        return DecodedFrame(frame, frame.decode())
    except InvalidImageError as exc:
        return exc
    except Exception as exc:  # a decoder bug must not take the worker down
        return InvalidImageError("undecodable", f"cannot decode: {exc}")
