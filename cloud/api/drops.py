"""Every refused or failed request is counted in a metric and written to the log."""

from __future__ import annotations

import logging
import threading
import time

from ..metrics import CloudMetrics

log = logging.getLogger("strata.cloud.api.drops")


class Drops:
    """Counts each failure; logs the first of a (method, reason) pair and then at most one
    line a second with the number since, so an overload does not flood the log."""

    def __init__(self, metrics: CloudMetrics, interval_s: float = 1.0) -> None:
        self.metrics = metrics
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], float] = {}
        self._since: dict[tuple[str, str], int] = {}

    def __call__(self, method: str, reason: str, detail: str) -> None:
        """Count one failure of `method` for `reason`; detail goes to the log."""
        self.metrics.fail(method, reason)
        key = (method, reason)
        now = time.monotonic()
        with self._lock:
            n = self._since.get(key, 0) + 1
            if now - self._last.get(key, -1e9) < self.interval_s:
                self._since[key] = n
                return
            self._last[key] = now
            self._since[key] = 0
        log.warning("%s refused (%s, %d since last line): %s", method, reason, n, detail)
