"""Circuit breaker for the cloud uplink: consecutive failures or a slow p99 open it.

It must not flap. Three rules keep it still: only the probe's own answer can close an open
breaker (acks of batches sent before it opened arrive late and say nothing about now); a probe
closes it only when its latency is well under the limit (hysteresis: `close_ratio` of it), so
a cloud sitting right at the limit stays open; and after closing, the p99 rule waits for a
fresh window of `min_samples` acks before it judges again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import IntEnum

import numpy as np

log = logging.getLogger(__name__)


class BreakerState(IntEnum):
    """Values match the strata_edge_breaker_state gauge."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


# (old state, new state): the callback tells a trip (CLOSED -> OPEN) from a failed probe.
OnChange = Callable[[BreakerState, BreakerState], None]


class CircuitBreaker:
    """CLOSED -> OPEN after `failures` in a row or p99 > limit; OPEN -> HALF_OPEN after
    `open_s`; the probe then closes it (fast enough success) or opens it again."""

    def __init__(
        self,
        failures: int,
        p99_limit_s: float,
        window: int,
        open_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: OnChange | None = None,
        close_ratio: float = 0.8,
        min_samples: int = 20,
    ) -> None:
        self.failure_threshold = failures
        self.p99_limit_s = p99_limit_s
        self.open_s = open_s
        self.close_ratio = close_ratio
        self.min_samples = min(min_samples, window)
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False
        self._latencies: deque[float] = deque(maxlen=window)
        self.reason = ""
        self.trips = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def allow(self) -> bool:
        """May a request go out now? In HALF_OPEN only one probe at a time: the caller marks
        the request it sends after a True in HALF_OPEN as the probe."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            if self._state is BreakerState.OPEN:
                if self._clock() - self._opened_at < self.open_s:
                    return False
                self._set(BreakerState.HALF_OPEN, "probe")
            if self._probing:
                return False
            self._probing = True
            return True

    def success(self, latency_s: float, probe: bool = False) -> None:
        """An ack came back after `latency_s`; `probe` when it answers the probe request."""
        with self._lock:
            if self._state is not BreakerState.CLOSED:
                if not probe:
                    return  # a late ack of a request sent before the breaker opened
                self._probing = False
                limit = self.close_ratio * self.p99_limit_s
                if latency_s > limit:
                    self._open(
                        f"probe answered in {latency_s * 1e3:.0f} ms, over the "
                        f"{limit * 1e3:.0f} ms needed to close"
                    )
                    return
                self._consecutive = 0
                self._latencies.clear()
                self._set(BreakerState.CLOSED, f"probe answered in {latency_s * 1e3:.0f} ms")
                return
            self._consecutive = 0
            self._latencies.append(latency_s)
            if len(self._latencies) >= self.min_samples:
                p99 = float(np.percentile(np.fromiter(self._latencies, float), 99))
                if p99 > self.p99_limit_s:
                    self._open(f"p99 latency {p99 * 1e3:.0f} ms > {self.p99_limit_s * 1e3:.0f} ms")

    def failure(self, why: str, probe: bool = False) -> None:
        """A request failed (error, timeout, unreachable); `probe` when it was the probe."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                self._consecutive += 1
                if self._consecutive >= self.failure_threshold:
                    self._open(f"{self._consecutive} consecutive failures, last: {why}")
            elif self._state is BreakerState.HALF_OPEN and (probe or not self._probing):
                # The probe failed, or the link failed before a probe could go out.
                self._probing = False
                self._open(f"probe failed: {why}")

    def seconds_until_probe(self) -> float:
        """0 when a request may go now, else how long until the next half-open probe."""
        with self._lock:
            if self._state is not BreakerState.OPEN:
                return 0.0
            return max(0.0, self.open_s - (self._clock() - self._opened_at))

    def _open(self, why: str) -> None:
        self._opened_at = self._clock()
        self._latencies.clear()
        self._consecutive = 0
        self._set(BreakerState.OPEN, why)

    def _set(self, state: BreakerState, why: str) -> None:
        old = self._state
        if state is old and state is not BreakerState.OPEN:
            return
        if old is BreakerState.CLOSED and state is BreakerState.OPEN:
            self.trips += 1
        log.warning("cloud breaker %s -> %s: %s", old.name, state.name, why)
        self._state = state
        self.reason = why
        if self._on_change is not None:
            self._on_change(old, state)
