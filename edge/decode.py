"""Decoding the frames of a batch in the worker pool, just before they are letterboxed.

Only frames taken for a batch are decoded. A payload that passed ingest's checks and still
does not decode is dropped here: counted by reason, logged (rate-limited) and handed to
`on_reject` so the node can give its sender a final answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from strata.shared.contracts import common_pb2
from strata.shared.imagecheck import InvalidImageError
from strata.shared.logs import RateLimitedLog

from .frames import DecodedFrame, QueuedFrame
from .metrics import EdgeMetrics

log = logging.getLogger(__name__)

RejectHook = Callable[[QueuedFrame, str, str], None]


class FrameDecoder:
    """Decodes batches, on `threads` threads when more than one (cv2 frees the GIL)."""

    def __init__(
        self, metrics: EdgeMetrics, threads: int = 1, on_reject: RejectHook | None = None
    ) -> None:
        self.metrics = metrics
        self.on_reject = on_reject
        self._pool = ThreadPoolExecutor(threads, "edge-decode") if threads > 1 else None
        self._log = RateLimitedLog(log)

    def decode(self, frames: Sequence[QueuedFrame]) -> list[DecodedFrame]:
        """The frames that decode, in order; the others are dropped with a reason."""
        # One frame, or raw BGR (a view, nothing to decode): no hand-off to the pool.
        if self._pool is None or len(frames) == 1 or not any(_encoded(f) for f in frames):
            results = [_decode(f) for f in frames]
        else:
            results = list(self._pool.map(_decode, frames))
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


def _encoded(frame: QueuedFrame) -> bool:
    return frame.header.encoding != common_pb2.ENCODING_BGR


def _decode(frame: QueuedFrame) -> DecodedFrame | InvalidImageError:
    try:
        return DecodedFrame(frame, frame.decode())
    except InvalidImageError as exc:
        return exc
    except Exception as exc:  # a decoder bug must not take the worker down
        return InvalidImageError("undecodable", f"cannot decode: {exc}")
