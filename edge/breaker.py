"""Circuit breaker for the cloud uplink: consecutive failures or a slow p99 open it."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import IntEnum

import numpy as np

log = logging.getLogger(__name__)

# Fewest latency samples before the p99 rule may trip the breaker.
MIN_LATENCY_SAMPLES = 10


class BreakerState(IntEnum):
    """Values match the strata_edge_breaker_state gauge."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    """CLOSED -> OPEN after `failures` in a row or p99 > limit; OPEN -> HALF_OPEN after
    `open_s`; one probe then closes it (success) or opens it again (failure)."""

    def __init__(
        self,
        failures: int,
        p99_limit_s: float,
        window: int,
        open_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.failure_threshold = failures
        self.p99_limit_s = p99_limit_s
        self.open_s = open_s
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False
        self._latencies: deque[float] = deque(maxlen=window)
        self.reason = ""

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def allow(self) -> bool:
        """May a request go out now? In HALF_OPEN only one probe at a time."""
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

    def success(self, latency_s: float) -> None:
        """An ack came back after `latency_s`."""
        with self._lock:
            self._consecutive = 0
            if self._state is not BreakerState.CLOSED:
                self._probing = False
                self._latencies.clear()
                self._set(BreakerState.CLOSED, "probe succeeded")
                return
            self._latencies.append(latency_s)
            if len(self._latencies) >= MIN_LATENCY_SAMPLES:
                p99 = float(np.percentile(np.fromiter(self._latencies, float), 99))
                if p99 > self.p99_limit_s:
                    self._open(f"p99 latency {p99 * 1e3:.0f} ms > {self.p99_limit_s * 1e3:.0f} ms")

    def failure(self, why: str) -> None:
        """A request failed (error, timeout, unreachable)."""
        with self._lock:
            self._consecutive += 1
            if self._state is BreakerState.HALF_OPEN:
                self._probing = False
                self._open(f"probe failed: {why}")
            elif self._state is BreakerState.CLOSED and self._consecutive >= self.failure_threshold:
                self._open(f"{self._consecutive} consecutive failures, last: {why}")

    def seconds_until_probe(self) -> float:
        """0 when a request may go now, else how long until the next half-open probe."""
        with self._lock:
            if self._state is not BreakerState.OPEN:
                return 0.0
            return max(0.0, self.open_s - (self._clock() - self._opened_at))

    def _open(self, why: str) -> None:
        self._opened_at = self._clock()
        self._latencies.clear()
        self._set(BreakerState.OPEN, why)

    def _set(self, state: BreakerState, why: str) -> None:
        if state is self._state and state is not BreakerState.OPEN:
            return
        log.warning("cloud breaker %s -> %s: %s", self._state.name, state.name, why)
        self._state = state
        self.reason = why
        if self._on_change is not None:
            self._on_change(state)
