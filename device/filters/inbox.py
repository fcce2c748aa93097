"""Frames that passed motion, waiting for a relevance gate that can drop them: a bounded
queue per camera (a gate that cannot drop is not waited for: device/pipeline.py).

The gate worker takes batches round-robin over cameras, so a fast file camera cannot starve
a live one. A full queue makes a file camera wait (reading a file faster than the gate is
pointless) and makes a live camera drop its oldest waiting frame (a camera cannot wait).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from ..capture.frames import Frame


@dataclass(slots=True)
class GateItem:
    """A frame that passed motion (still in decoder format: it is converted to BGR only at
    the size it is sent at), with what its header will need; or a dropped frame's notice."""

    camera_id: str
    index: int
    capture_ns: int
    frame: Frame
    motion_score: float
    queued_at: float
    # Non-empty: the frame was dropped for this reason; only its header-only message goes on.
    skip_reason: str = ""
    # Part of a calibration burst (the relevance gate does not drop it either).
    calibration: bool = False
    # The motion gate saw a cut or a pan (device/filters/motion.py); the header says so.
    scene_change: bool = False
    # A calibration frame the motion gate alone would have dropped as unchanged.
    unchanged: bool = False
    # One of a burst's first `device.cascade.codec_probes` frames: sent as raw pixels so
    # the edge measures what the payload codec costs (FrameHeader.codec_probe_quality).
    codec_probe: bool = False


class GateInbox:
    """Per-camera bounded queues with batch taking across cameras."""

    def __init__(self, per_camera: int) -> None:
        self.per_camera = per_camera
        self._queues: dict[str, deque[GateItem]] = {}
        self._order: list[str] = []
        self._next = 0
        self._cond = threading.Condition()
        self._closed = False
        # Items over all queues: with many cameras, scanning every queue on each wake-up
        # (and twice per batch) cost more than the frames they held.
        self._count = 0

    def add_camera(self, camera_id: str) -> None:
        """Create the camera's queue."""
        with self._cond:
            self._queues.setdefault(camera_id, deque())
            if camera_id not in self._order:
                self._order.append(camera_id)

    def waiting(self, camera_id: str) -> int:
        """Frames of the camera waiting for the gate."""
        with self._cond:
            return len(self._queues.get(camera_id, ()))

    def flush(self) -> None:
        """Nothing waits here for more frames: each dropped frame's notice goes on alone."""

    def put(
        self, item: GateItem, wait: bool, stop: threading.Event | None = None
    ) -> GateItem | None:
        """Queue `item`. If full: wait for room (`wait`), else drop and return the oldest."""
        with self._cond:
            q = self._queues[item.camera_id]
            while wait and len(q) >= self.per_camera and not self._closed:
                if stop is not None and stop.is_set():
                    return item  # shutting down: the caller counts it as not processed
                self._cond.wait(0.1)
            dropped = q.popleft() if len(q) >= self.per_camera else None
            q.append(item)
            self._count += dropped is None
            self._cond.notify_all()
            return dropped

    def take(self, max_items: int, max_delay_s: float, timeout_s: float) -> list[GateItem]:
        """Up to `max_items`: wait up to `timeout_s` for the first, then up to `max_delay_s`
        for the batch to fill. Round-robin over cameras."""
        out: list[GateItem] = []
        with self._cond:
            # A close wakes the taker at once: a stopping agent does not wait out the timeout.
            if not self._cond.wait_for(self._any_or_closed, timeout_s) or not self._count:
                return out
            deadline = time.monotonic() + max_delay_s
            while True:
                self._drain_into(out, max_items)
                if len(out) >= max_items or self._closed:
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait_for(self._any, left):
                    self._drain_into(out, max_items)
                    break
            self._cond.notify_all()  # room for waiting producers
        return out

    def _any(self) -> bool:
        return self._count > 0

    def _any_or_closed(self) -> bool:
        return self._count > 0 or self._closed

    @property
    def closed(self) -> bool:
        """`close` was called: no producer waits for room any more."""
        return self._closed

    def _drain_into(self, out: list[GateItem], max_items: int) -> None:
        n = len(self._order)
        empty_rounds = 0
        while len(out) < max_items and n and empty_rounds < n and self._count:
            cam = self._order[self._next % n]
            self._next += 1
            q = self._queues[cam]
            if q:
                out.append(q.popleft())
                self._count -= 1
                empty_rounds = 0
            else:
                empty_rounds += 1

    def __len__(self) -> int:
        with self._cond:
            return self._count

    def close(self) -> None:
        """Wake everyone; producers stop waiting."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
