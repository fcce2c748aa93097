"""Fan-out of newly stored events to WatchEvents streams, each with a bounded queue."""

from __future__ import annotations

import logging
import queue
import threading

from strata.shared.contracts import analytics_pb2

from .metrics import CloudMetrics

log = logging.getLogger(__name__)


class Subscription:
    """One watcher: a filter and a bounded queue; `dropped` once it fell behind."""

    def __init__(self, camera_id: str, label: str, size: int) -> None:
        self.camera_id = camera_id
        self.label = label
        self.queue: queue.Queue[analytics_pb2.Event] = queue.Queue(maxsize=size)
        self.dropped = False
        self.closed = False

    def wants(self, ev: analytics_pb2.Event) -> bool:
        """Whether the event passes this watcher's filter."""
        return (not self.camera_id or ev.camera_id == self.camera_id) and (
            not self.label or ev.label == self.label
        )


class WatchHub:
    """Publishes committed events to every matching subscription without ever blocking."""

    def __init__(self, metrics: CloudMetrics, max_watchers: int, queue_size: int) -> None:
        self.metrics = metrics
        self.max_watchers = max_watchers
        self.queue_size = queue_size
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()

    def subscribe(self, camera_id: str, label: str) -> Subscription | None:
        """A new subscription, or None when max_watchers are open."""
        with self._lock:
            if len(self._subs) >= self.max_watchers:
                return None
            sub = Subscription(camera_id, label, self.queue_size)
            self._subs.append(sub)
            self.metrics.watchers.set(len(self._subs))
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget a subscription."""
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
            self.metrics.watchers.set(len(self._subs))

    def publish(self, events: list[analytics_pb2.Event]) -> None:
        """Offer events to every watcher; one whose queue is full is dropped, not waited for."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            if sub.dropped:
                continue
            for ev in events:
                if not sub.wants(ev):
                    continue
                try:
                    sub.queue.put_nowait(ev)
                except queue.Full:
                    sub.dropped = True
                    self.metrics.watchers_dropped.inc()
                    log.warning(
                        "a WatchEvents stream fell %d events behind; closing it", self.queue_size
                    )
                    break

    def close(self) -> None:
        """Tell every watcher to end."""
        with self._lock:
            for sub in self._subs:
                sub.closed = True
