"""GPU pressure levels: the design's triggers, and their actions cheapest first.

(Not the device's source degradation, strata.device.transport.degrade: that one acts on a camera.)

Triggers (`edge.overload.gpu_pressure`): GPU temperature above 85 C for a minute, GPU memory above
90 %, inference p99 above twice the SLA. While any holds, the level rises one step per
`step_s`; once all have been clear (below their lower clear thresholds) for `clear_for_s`
it falls one step per `step_s`. The stages read the actions off it:

    1 `crops_enabled` False: the cloud's second opinions stop (the non-critical branch)
    2 `batch_cap(limit)`: the batch size is divided
    3 `credit_scale` / `device_level`: devices are asked for fewer frames (acks)
    4 `from_cache(camera)`: low-priority cameras are answered with their last result

Every transition is logged and counted. It has no thread of its own: the
worker calls `observe_inference` per batch and `tick` about once a second, with
samples from a TelemetrySource (NVML, or what a test injects).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from strata.shared.config.edge import GpuPressureConfig
from strata.shared.gpu_telemetry import GpuSample

log = logging.getLogger(__name__)

LEVELS = ("normal", "no_cloud_crops", "smaller_batches", "fewer_frames", "cached_low_priority")
TRIGGERS = ("gpu_temperature", "gpu_memory", "inference_p99")


class GpuPressureMetrics:
    """The GPU pressure metrics, in the node's registry (their names predate the rename)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.level = Gauge(
            "strata_edge_degradation_level",
            "Degradation level: 0 normal, 1 no cloud crops, 2 smaller batches, "
            "3 fewer frames from devices, 4 low-priority cameras from cache.",
            registry=registry,
        )
        self.transitions = Counter(
            "strata_edge_degradation_transitions",
            "Level changes, by direction, new level and the triggers active then.",
            ["direction", "level", "reason"],
            registry=registry,
        )
        self.trigger = Gauge(
            "strata_edge_degradation_trigger",
            "1 while a trigger holds (gpu_temperature, gpu_memory, inference_p99).",
            ["trigger"],
            registry=registry,
        )
        self.inference_p99 = Gauge(
            "strata_edge_inference_p99_seconds",
            "p99 of the last batches' inference time (the p99 trigger's input).",
            registry=registry,
        )
        self.skipped = Counter(
            "strata_edge_degradation_actions",
            "Work the degradation skipped: crops not sent, frames answered from cache.",
            ["action"],
            registry=registry,
        )


class GpuPressure:
    """Triggers in, a level with hysteresis out (see the module docstring)."""

    def __init__(
        self,
        cfg: GpuPressureConfig,
        metrics: GpuPressureMetrics,
        clock: Callable[[], float] = time.monotonic,
        on_gpu: bool = True,
    ) -> None:
        self.cfg = cfg
        self.enabled = cfg.enabled is True or (cfg.enabled == "auto" and on_gpu)
        self.metrics = metrics
        self.clock = clock
        self.level = 0
        self.low_priority = frozenset(cfg.low_priority_cameras)
        self._inference: deque[float] = deque(maxlen=cfg.p99_window)
        self._active: dict[str, bool] = dict.fromkeys(TRIGGERS, False)
        self._hot_since: float | None = None
        self._changed = float("-inf")
        self._clear_since: float | None = None
        self._last_tick = float("-inf")
        for t in TRIGGERS:
            metrics.trigger.labels(t).set(0)
        metrics.level.set(0)

    # -- inputs ----------------------------------------------------------------------------

    def observe_inference(self, seconds: float) -> None:
        """One batch's inference time (worker thread)."""
        self._inference.append(seconds)

    def due(self) -> bool:
        """Whether `interval_s` has passed since the last tick."""
        return self.enabled and self.clock() - self._last_tick >= self.cfg.interval_s

    def tick(self, samples: Sequence[GpuSample]) -> int:
        """Evaluate the triggers on fresh samples and move the level; returns the level."""
        now = self.clock()
        self._last_tick = now
        if not self.enabled:
            return self.level
        self._update_triggers(samples, now)
        active = [t for t in TRIGGERS if self._active[t]]
        if active:
            self._clear_since = None
            if self.level < self.cfg.max_level and now - self._changed >= self.cfg.step_s:
                self._move(+1, active, now)
        else:
            if self._clear_since is None:
                self._clear_since = now
            clear_long = now - self._clear_since >= self.cfg.clear_for_s
            if self.level > 0 and clear_long and now - self._changed >= self.cfg.step_s:
                self._move(-1, ["clear"], now)
        return self.level

    def _update_triggers(self, samples: Sequence[GpuSample], now: float) -> None:
        c = self.cfg
        temps = [s.temperature_c for s in samples if s.temperature_c is not None]
        temp = max(temps) if temps else None
        if temp is not None and temp > c.gpu_temp_c:
            if self._hot_since is None:
                self._hot_since = now
            if now - self._hot_since >= c.gpu_temp_for_s:
                self._active["gpu_temperature"] = True
        else:
            self._hot_since = None
            if temp is None or temp < c.gpu_temp_clear_c:
                self._active["gpu_temperature"] = False
        fractions = [f for f in (s.memory_fraction for s in samples) if f is not None]
        mem = max(fractions) if fractions else None
        if mem is not None and mem > c.gpu_memory_fraction:
            self._active["gpu_memory"] = True
        elif mem is None or mem < c.gpu_memory_clear_fraction:
            self._active["gpu_memory"] = False
        p99 = self.inference_p99()
        sla = c.inference_sla_ms / 1e3
        if p99 is not None:
            self.metrics.inference_p99.set(p99)
            if p99 > c.p99_factor * sla:
                self._active["inference_p99"] = True
            elif p99 < c.p99_clear_factor * sla:
                self._active["inference_p99"] = False
        for t in TRIGGERS:
            self.metrics.trigger.labels(t).set(1 if self._active[t] else 0)

    def inference_p99(self) -> float | None:
        """p99 of the window, or None before `p99_min_samples` batches."""
        if len(self._inference) < self.cfg.p99_min_samples:
            return None
        return float(np.percentile(np.fromiter(self._inference, float), 99))

    def _move(self, step: int, reasons: list[str], now: float) -> None:
        old, self.level = self.level, self.level + step
        self._changed = now
        if step < 0:
            self._clear_since = now  # the next step down needs another clear period
        direction = "up" if step > 0 else "down"
        reason = "+".join(reasons)
        self.metrics.level.set(self.level)
        self.metrics.transitions.labels(direction, str(self.level), reason).inc()
        log.warning(
            "degradation %s: level %d (%s) -> %d (%s); triggers: %s",
            direction,
            old,
            LEVELS[old],
            self.level,
            LEVELS[self.level],
            reason,
        )

    # -- actions (read by the node) --------------------------------------------------------

    @property
    def crops_enabled(self) -> bool:
        """Level 1+: the cloud's second opinions stop."""
        return self.level < 1

    def batch_cap(self, limit: int) -> int:
        """Level 2+: the batch limit divided (never below 1)."""
        if self.level < 2:
            return limit
        return max(1, limit // self.cfg.batch_divisor)

    @property
    def credit_scale(self) -> float:
        """Level 3+: the share of their credit devices are granted."""
        return self.cfg.credit_scale if self.level >= 3 else 1.0

    @property
    def device_level(self) -> int:
        """Level 3+: the least degrade_level the node asks of every device (1: motion)."""
        return 1 if self.level >= 3 else 0

    def from_cache(self, camera_id: str) -> bool:
        """Level 4: whether this camera's frames are answered from its last result."""
        return self.level >= 4 and camera_id in self.low_priority
