"""Degradation at the source: what a camera gives up when the edge says it is overloaded.

The edge's acks carry a degradation level per camera (0-3, decided there with hysteresis
from the node's pressure and the camera's use of its credits): how far the camera MAY
degrade. How far it does depends on its own need: a camera whose frames keep waiting
behind its credit window (more than a window, and more than `backlog_s` of frames, waiting
for `up_s`) steps up one level at a time, up to the edge's level, and steps down one level
per `down_s` with nothing waiting (hysteresis). So a camera within its fair share is never
degraded. Cheapest first:
  1. raise the motion threshold (fewer frames kept, nothing decoded twice, nothing sent);
  2. also cap the frame rate kept to a little above what the edge finishes for the camera;
  3. also bound the frames waiting to be sent to one credit window, dropping the oldest
     or the newest (config `degrade.drop_policy`).
Every frame given up is counted per camera and reason (degraded_motion, degraded_rate,
degraded_policy) and logged, rate-limited.

Thread-safe enough by construction: the sender thread writes the level and rate, the
camera thread reads them (single attribute reads and writes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from strata.shared.config.device import DegradeConfig

REASON_MOTION = "degraded_motion"
REASON_RATE = "degraded_rate"
REASON_POLICY = "degraded_policy"


class ProcessedRate:
    """Frames per second the edge finished for one camera, over ~1 s windows (EWMA)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._count = 0
        self.fps = 0.0

    def add(self, n: int = 1) -> None:
        """Count finished frames."""
        self._count += n
        self.tick()

    def tick(self) -> None:
        """Close the window when it is a second old."""
        now = self._clock()
        span = now - self._start
        if span >= 1.0:
            sample = self._count / span
            self.fps = sample if self.fps == 0 else 0.5 * self.fps + 0.5 * sample
            self._start, self._count = now, 0


class SourceDegrader:
    """One camera's degradation: the level asked by the edge and what it implies."""

    def __init__(self, cfg: DegradeConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self._clock = clock
        # What applies now: min(the edge's level, this camera's need).
        self.level = 0
        self.edge_level = 0
        self.need = 0
        self.rate = ProcessedRate(clock)
        self._last_kept = clock()
        self._tokens = 1.0
        self._changed = clock()
        self._backlog_since = -1.0
        # More than a window waiting right now: only then does a level drop anything, so
        # degradation never starves the edge of frames it could take (work-conserving).
        self.backlogged = False
        self._calm_since = -1.0

    def set_level(self, level: int) -> None:
        """The level from the latest ack (ignored when degradation is off)."""
        self.edge_level = min(3, max(0, level)) if self.cfg.enabled else 0
        self.level = min(self.edge_level, self.need)

    def observe_backlog(self, waiting: int, window: int) -> None:
        """The camera's frames waiting to be sent (sender thread, every loop)."""
        now = self._clock()
        self.backlogged = waiting > window
        # A backlog: more than a window, and more than `backlog_s` of what the edge
        # finishes for this camera, waiting (a one-frame window is no measure alone).
        if waiting > max(window, self.rate.fps * self.cfg.backlog_s):
            self._calm_since = -1.0
            if self._backlog_since < 0:
                self._backlog_since = now
            if (
                self.need < 3
                and self.need < self.edge_level
                and now - max(self._backlog_since, self._changed) >= self.cfg.up_s
            ):
                self.need += 1
                self._changed = now
        else:
            self._backlog_since = -1.0
            if waiting == 0 and self._calm_since < 0:
                self._calm_since = now
            if (
                self.need > 0
                and self._calm_since >= 0
                and now - max(self._calm_since, self._changed) >= self.cfg.down_s
            ):
                self.need -= 1
                self._changed = now
        self.level = min(self.edge_level, self.need)

    def motion_threshold(self, base: float) -> float:
        """The motion threshold to use now."""
        return base * self.cfg.motion_factor if self.level >= 1 and self.backlogged else base

    def rate_cap(self) -> float:
        """Most frames per second to keep now (inf below level 2)."""
        if self.level < 2 or not self.backlogged:
            return float("inf")
        return max(self.cfg.min_fps, self.rate.fps * self.cfg.rate_headroom)

    def keep_by_rate(self) -> bool:
        """Whether a frame passing now fits under the rate cap (and counts it as kept).

        A token bucket (half a second of burst), not a minimum interval: with frames every
        75 ms a 244 ms interval would keep one in four, far below the cap, and the edge's
        processed rate (the cap's base) would follow it down.
        """
        now = self._clock()
        cap = self.rate_cap()
        elapsed, self._last_kept = now - self._last_kept, now
        if cap == float("inf"):
            self._tokens = 1.0
            return True
        self._tokens = min(max(1.0, cap * 0.5), self._tokens + elapsed * cap)
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def waiting_limit(self, window: int) -> int | None:
        """At level 3, how many frames may wait to be sent (None: no bound here)."""
        return max(1, window) if self.level >= 3 else None
