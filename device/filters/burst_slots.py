"""Calibration bursts of one agent's cameras, a few at a time.

A burst sends every frame of a camera for `burst_frames` frames: a JPEG each, where the
camera otherwise sends one in six. Cameras started together are due together (frame 0,
then every `calibrate_every` frames, in step), and an edge's new session asks all its
cameras at once: sixteen 720p cameras bursting together put 0.4-0.7 s of lag on a 2-core
host at start, where one at a time leaves under 0.2 s (docs/device.md, "Calibration
bursts in turn"). A due burst without a slot waits for one, frame by frame; the bursts
that waited then stay spread out.

Invariant: at most `limit` cameras hold a slot, a camera holds at most one, and only the
camera holding a slot gives it back.
"""

from __future__ import annotations

import os
import threading


class BurstSlots:
    """Slots for cameras in a calibration burst; `limit` 0: one per CPU core."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit if limit > 0 else max(1, os.cpu_count() or 1)
        self._lock = threading.Lock()
        self._holders: set[str] = set()

    def take(self, camera_id: str) -> bool:
        """A slot for `camera_id`'s burst (True also when it holds one already)."""
        with self._lock:
            if camera_id in self._holders:
                return True
            if len(self._holders) >= self.limit:
                return False
            self._holders.add(camera_id)
            return True

    def give_back(self, camera_id: str) -> None:
        """`camera_id`'s burst ended (or its frames stopped); nothing if it held none."""
        with self._lock:
            self._holders.discard(camera_id)

    def holders(self) -> frozenset[str]:
        """The cameras in a burst now."""
        with self._lock:
            return frozenset(self._holders)
