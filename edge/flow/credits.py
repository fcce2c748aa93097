"""Credit-based admission: how many frames each camera may have in the node at once.

The node measures what it can finish (frames per second of busy time, so a lightly loaded
node still knows its capacity) and grants the cameras together what it can finish within
its delay target, split evenly over the cameras active lately.
A frame beyond its camera's credit is not taken: BUSY, with a retry hint. So the queues
never hold more than the node finishes within the target, whatever is offered.

Pressure is the smoothed queue delay over the target. A camera that keeps using all of its
credit while the node is loaded is asked to degrade at its source, one level per period;
when it stops saturating (or the node unloads) the level comes down one step per longer
period (hysteresis, so a degraded camera does not bounce back at the first quiet moment).

Thread-safe: the ingest thread admits, the worker thread releases and observes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from strata.shared.config.edge import FlowConfig

MAX_LEVEL = 3


class CreditLimits(Protocol):
    """What the overload mechanisms impose on the credits (strata.edge.overload.limits):
    GPU pressure level 3 scales them and asks devices for at least level 1; the batch
    limit in force (the policy's, capped by GPU pressure) sizes their floor."""

    @property
    def credit_scale(self) -> float: ...

    @property
    def device_level(self) -> int: ...

    def batch_limit(self) -> int: ...


class NoLimits:
    """Credits with no overload mechanism on top: scale 1, level 0, the model's batch."""

    credit_scale = 1.0
    device_level = 0

    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch

    def batch_limit(self) -> int:
        return self.max_batch


@dataclass(frozen=True, slots=True)
class Grant:
    """What an ack tells a camera: its credit, the node's pressure, the degradation asked."""

    credits: int
    pressure: float
    degrade_level: int
    retry_after_ms: int = 0


@dataclass(slots=True)
class _Camera:
    pending: int = 0
    last_active: float = 0.0
    level: int = 0
    # Admissions in the current period, and how many of them found the credit used up.
    admits: int = 0
    saturated: int = 0
    busy: int = 0
    level_since: float = 0.0
    calm_since: float = field(default=-1.0)


class CapacityMeter:
    """Frames finished per second of busy time, smoothed (EWMA over ~`window_s` samples)."""

    def __init__(self, window_s: float = 0.5, alpha: float = 0.3) -> None:
        self.window_s = window_s
        self.alpha = alpha
        self.fps = 0.0
        self._frames = 0
        self._busy = 0.0

    def add(self, frames: int, busy_s: float) -> None:
        """Record `frames` finished over `busy_s` seconds of work."""
        self._frames += frames
        self._busy += busy_s
        if self._busy >= self.window_s and self._frames:
            sample = self._frames / self._busy
            a = self.alpha
            self.fps = sample if self.fps == 0 else (1 - a) * self.fps + a * sample
            self._frames, self._busy = 0, 0.0


class CreditGate:
    """Per-camera credits from measured capacity and the delay target; pressure and levels."""

    def __init__(
        self,
        cfg: FlowConfig,
        delay_target_s: float,
        max_batch: int,
        max_per_camera: int,
        clock: Callable[[], float] = time.monotonic,
        limits: CreditLimits | None = None,
    ) -> None:
        self.cfg = cfg
        self.target_s = delay_target_s
        self.max_batch = max_batch
        self.max_per_camera = max_per_camera
        self.capacity = CapacityMeter()
        self._clock = clock
        self._cams: dict[str, _Camera] = {}
        self._lock = threading.Lock()
        self._delay = 0.0
        self._active = 1
        self._next_period = 0.0
        self.limits: CreditLimits = limits or NoLimits(max_batch)

    # -- measurements (worker thread) ------------------------------------------------------

    def observe_batch(self, frames: int, busy_s: float, queue_delays_s: list[float]) -> None:
        """One finished batch: its frames, the busy time it took, its frames' queue delays."""
        with self._lock:
            self.capacity.add(frames, busy_s)
            if queue_delays_s:
                d = max(queue_delays_s)
                self._delay = d if self._delay == 0 else 0.8 * self._delay + 0.2 * d

    def decay_delay(self) -> None:
        """An idle moment: nothing waits, the pressure falls."""
        with self._lock:
            self._delay *= 0.8

    @property
    def pressure(self) -> float:
        """Smoothed queue delay over the delay target (>1: overloaded)."""
        return self._delay / self.target_s if self.target_s > 0 else 0.0

    @property
    def loaded(self) -> bool:
        """Whether the node is loaded (pressure at `flow.loaded_pressure` or above): cameras
        degrade, and work the results do not need (a codec probe's second run) waits."""
        return self.pressure >= self.cfg.loaded_pressure

    @property
    def total_credits(self) -> int:
        """Frames the node may hold over all cameras."""
        return max(self._floor(), self._little())

    def _floor(self) -> int:
        # Never less than a batch in service plus the next one queued: with fewer, each
        # batch is cut short by the acks still travelling back and the frames they let in,
        # so batches shrink, the measured capacity with them, and the credits after it.
        return math.ceil(self.cfg.batches_in_node * max(1, self.limits.batch_limit()))

    def _little(self) -> int:
        fps = self.capacity.fps
        if fps <= 0 or self.target_s <= 0:
            return self.cfg.initial_credits * max(1, self._active)
        # Little's law: the batch in service plus what the node finishes in headroom x the
        # target. A frame then waits about headroom x target (the mean queue delay) and its
        # own batch: p99 near the target, whatever the batch limit. Sized at the full
        # target instead, the mean queue delay sits at the target, so the batch rule
        # (strata.edge.overload.batch_limit) halves the batch on any hiccup and, the credits keeping
        # the delay there, never doubles it back: smaller batches, less capacity.
        queued = round(fps * self.target_s * self.cfg.credit_headroom)
        return max(self.cfg.min_credits * self._active, max(1, self.limits.batch_limit()) + queued)

    @property
    def held(self) -> int:
        """Frames taken and not yet settled, over all cameras."""
        with self._lock:
            return sum(c.pending for c in self._cams.values())

    # -- admission (ingest thread) ---------------------------------------------------------

    def credits(self, camera_id: str) -> int:
        """The camera's credit now."""
        with self._lock:
            return self._credits_locked()

    def _credits_locked(self) -> int:
        active = max(1, self._active)
        # Rounded down, so the cameras together hold no more than the total (rounded up,
        # three cameras could hold two frames more, two frames more queue delay); the
        # floor rounded up, so they hold at least that.
        share = max(math.ceil(self._floor() / active), self._little() // active)
        share = min(self.max_per_camera, share)
        # GPU pressure's scale after the per-camera cap, so it cuts a capped credit too.
        return max(self.cfg.min_credits, math.ceil(share * self.limits.credit_scale))

    def _level(self, cam: _Camera | None) -> int:
        return max(cam.level if cam else 0, self.limits.device_level)

    def has_room(self, camera_id: str) -> bool:
        """Whether the camera's credit allows one more frame; a no is counted as BUSY."""
        now = self._clock()
        with self._lock:
            cam = self._camera(camera_id, now)
            if cam.pending < self._credits_locked():
                return True
            cam.admits += 1
            cam.saturated += 1
            cam.busy += 1
            return False

    def try_admit(self, camera_id: str) -> Grant | None:
        """Take one frame of the camera if its credit allows; None: BUSY (see `busy`)."""
        now = self._clock()
        with self._lock:
            cam = self._camera(camera_id, now)
            credit = self._credits_locked()
            cam.admits += 1
            if cam.pending >= credit:
                cam.saturated += 1
                cam.busy += 1
                return None
            cam.pending += 1
            if cam.pending >= credit:
                cam.saturated += 1
            return Grant(credit, self.pressure, self._level(cam))

    def busy(self, camera_id: str) -> Grant:
        """The grant of a BUSY answer: retry when about one camera's share has finished."""
        with self._lock:
            credit = self._credits_locked()
            cam = self._cams.get(camera_id)
            fps = self.capacity.fps
            per_cam = fps / max(1, self._active) if fps > 0 else 0.0
            wait_s = 1.0 / per_cam if per_cam > 0 else self.cfg.retry_min_ms / 1e3
            retry = int(
                min(max(wait_s * 1e3, self.cfg.retry_min_ms), max(self.target_s * 1e3, 1.0))
            )
            return Grant(credit, self.pressure, self._level(cam), retry)

    def grant(self, camera_id: str) -> Grant:
        """The current grant (for acks that take nothing: duplicates, final acks)."""
        with self._lock:
            cam = self._cams.get(camera_id)
            return Grant(self._credits_locked(), self.pressure, self._level(cam))

    def release(self, camera_id: str) -> None:
        """A frame of the camera is settled: its credit is free again."""
        with self._lock:
            cam = self._cams.get(camera_id)
            if cam is not None and cam.pending > 0:
                cam.pending -= 1

    def _camera(self, camera_id: str, now: float) -> _Camera:
        cam = self._cams.get(camera_id)
        new = cam is None
        if cam is None:
            cam = self._cams[camera_id] = _Camera(level_since=now)
        cam.last_active = now
        if new:
            # It shares the credits from its first frame: counted only at the next period,
            # each camera of a burst of new ones would get the whole total (the node then
            # holds cameras x total frames, and every one of them gets BUSY answers after).
            horizon = now - self.cfg.active_s
            self._active = sum(1 for c in self._cams.values() if c.last_active >= horizon)
        if now >= self._next_period:
            self._period(now)
        return cam

    # -- levels (once per period, under the lock) ------------------------------------------

    def _period(self, now: float) -> None:
        cfg = self.cfg
        self._next_period = now + cfg.period_s
        horizon = now - cfg.active_s
        for key in [k for k, c in self._cams.items() if c.last_active < horizon and not c.pending]:
            del self._cams[key]
        self._active = max(1, sum(1 for c in self._cams.values() if c.last_active >= horizon))
        loaded = self.pressure >= cfg.loaded_pressure
        for cam in self._cams.values():
            saturating = cam.busy > 0 or (
                cam.admits > 0 and cam.saturated >= cfg.saturated_fraction * cam.admits
            )
            # Credits keep the node's queue short, so a camera held at its credit is the
            # overload signal (the node's pressure is one too): the level is what the camera
            # may shed; it sheds only what its own backlog needs (strata.device.transport.degrade).
            if saturating or loaded:
                cam.calm_since = -1.0
                if cam.level < MAX_LEVEL and now - cam.level_since >= cfg.up_s:
                    cam.level += 1
                    cam.level_since = now
            else:
                if cam.calm_since < 0:
                    cam.calm_since = now
                if cam.level > 0 and now - max(cam.calm_since, cam.level_since) >= cfg.down_s:
                    cam.level -= 1
                    cam.level_since = now
            cam.admits = cam.saturated = cam.busy = 0

    @property
    def active_cameras(self) -> int:
        """Cameras that sent a frame within `active_s`."""
        return self._active

    def level(self, camera_id: str) -> int:
        """The degradation level asked of a camera now."""
        with self._lock:
            return self._level(self._cams.get(camera_id))
