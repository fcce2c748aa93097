"""Per-camera bounded queues served round-robin, with Triton-style batch release.

One busy camera cannot starve the others: a batch takes one frame per camera in turn,
continuing next time where it stopped. Credits (strata.edge.flow.credits) keep each camera's
queue within what the node finishes in its delay target; the per-camera bound here is the
hard stop behind them: a full queue refuses the frame (the node answers BUSY), it never
drops one it has acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from strata.edge.ingest.frames import QueuedFrame

log = logging.getLogger(__name__)


class CameraQueues:
    """Bounded FIFO per camera; `next_batch` implements max-batch / max-queue-delay release."""

    def __init__(
        self,
        per_camera: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_camera = per_camera
        self._queues: dict[str, deque[QueuedFrame]] = {}
        # Cameras that have frames, in serving order (the round-robin cursor is its head).
        self._order: deque[str] = deque()
        self._total = 0
        self._cond = threading.Condition()
        self._clock = clock
        self._closed = False

    def __len__(self) -> int:
        return self._total

    @property
    def cameras(self) -> int:
        """Cameras seen so far."""
        return len(self._queues)

    def put(self, frame: QueuedFrame) -> bool:
        """Enqueue; False (nothing queued) when the camera's queue is full."""
        cam = frame.header.camera_id
        with self._cond:
            q = self._queues.get(cam)
            if q is None:
                q = self._queues[cam] = deque()
            if len(q) >= self.per_camera:
                return False
            if not q:
                self._order.append(cam)
            q.append(frame)
            self._total += 1
            self._cond.notify()
        return True

    def depth(self, camera_id: str) -> int:
        """Frames of one camera waiting."""
        with self._cond:
            q = self._queues.get(camera_id)
            return len(q) if q else 0

    def forget(self, camera_ids: list[str]) -> list[str]:
        """Drop the (empty) queues of these cameras; returns those dropped (a camera with
        frames still queued is kept)."""
        gone = []
        with self._cond:
            for cam in camera_ids:
                q = self._queues.get(cam)
                if q is not None and not q:
                    del self._queues[cam]
                    gone.append(cam)
                elif q is None:
                    gone.append(cam)
        return gone

    def close(self) -> None:
        """Wake every waiter; next_batch returns what is left, then empty lists."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _oldest(self) -> float:
        return min(q[0].received for q in self._queues.values() if q)

    def next_batch(self, max_batch: int, max_delay_s: float, timeout_s: float) -> list[QueuedFrame]:
        """Wait for a batch: full at `max_batch`, or when the oldest frame has waited
        `max_delay_s`; an empty list when neither happened within `timeout_s`."""
        with self._cond:
            deadline = self._clock() + timeout_s
            while not self._closed:
                if self._total >= max_batch:
                    break
                now = self._clock()
                if self._total > 0:
                    due = self._oldest() + max_delay_s
                    if now >= due:
                        break
                    if now >= deadline:
                        return []
                    self._cond.wait(min(due, deadline) - now)
                else:
                    if now >= deadline:
                        return []
                    self._cond.wait(deadline - now)
            return self._take(max_batch)

    def _take(self, n: int) -> list[QueuedFrame]:
        out: list[QueuedFrame] = []
        while self._order and len(out) < n:
            cam = self._order.popleft()
            q = self._queues[cam]
            out.append(q.popleft())
            if q:
                self._order.append(cam)
        self._total -= len(out)
        return out
