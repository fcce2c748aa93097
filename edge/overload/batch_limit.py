"""The adaptive batch limit (`edge.overload.batch_limit`): lower the batch size while the
queue-delay target is missed, raise it back."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class AdaptiveBatchLimit:
    """Halve the batch limit when a window's mean queue delay misses the target; double it
    again (up to the configured maximum) once the delay is under half the target."""

    def __init__(self, max_batch: int, min_batch: int, target_s: float, window: int) -> None:
        self.max_batch = max_batch
        self.min_batch = min(min_batch, max_batch)
        self.target_s = target_s
        self.window = window
        self.limit = max_batch
        self._sum = 0.0
        self._count = 0
        self._batches = 0

    def observe(self, queue_delays_s: list[float]) -> int:
        """Record one batch's per-frame queue delays; returns the (possibly new) limit."""
        if self.target_s <= 0:
            return self.limit
        self._sum += sum(queue_delays_s)
        self._count += len(queue_delays_s)
        self._batches += 1
        if self._batches < self.window or self._count == 0:
            return self.limit
        mean = self._sum / self._count
        self._sum, self._count, self._batches = 0.0, 0, 0
        old = self.limit
        if mean > self.target_s and self.limit > self.min_batch:
            self.limit = max(self.min_batch, self.limit // 2)
        elif mean < self.target_s / 2 and self.limit < self.max_batch:
            self.limit = min(self.max_batch, self.limit * 2)
        if self.limit != old:
            log.warning(
                "queue delay %.1f ms vs target %.1f ms: batch limit %d -> %d",
                mean * 1e3,
                self.target_s * 1e3,
                old,
                self.limit,
            )
        return self.limit
