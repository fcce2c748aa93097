"""Fan-out of newly stored events to WatchEvents streams, each with a bounded queue.

The store feeds the hub: SQLite straight from its writer, PostgreSQL from a LISTEN connection
that hears every replica's commits (postgres_feed). When that feed breaks, events may have been
missed, so every open stream is ended (UNAVAILABLE: reconnect, re-query) and new ones are
refused until the feed is back: a watcher never silently misses an event.
"""

from __future__ import annotations

import logging
import queue
import threading

from strata.shared.contracts import analytics_pb2

from .metrics import CloudMetrics

log = logging.getLogger(__name__)


class WatchUnavailableError(RuntimeError):
    """The event feed is down; a new stream could miss events."""


class Subscription:
    """One watcher: a filter and a bounded queue; `dropped` (with a reason) once it fell
    behind or the feed broke."""

    def __init__(self, camera_id: str, label: str, size: int) -> None:
        self.camera_id = camera_id
        self.label = label
        self.queue: queue.Queue[analytics_pb2.Event] = queue.Queue(maxsize=size)
        self.dropped = False
        self.feed_lost = ""  # why the feed broke, when that ended this stream
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
        self._paused = ""

    def subscribe(self, camera_id: str, label: str) -> Subscription | None:
        """A new subscription, or None when max_watchers are open. Raises
        WatchUnavailableError while the feed is down."""
        with self._lock:
            if self._paused:
                raise WatchUnavailableError(self._paused)
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

    def interrupt(self, reason: str) -> None:
        """Events may have been missed: end every open stream (each reconnects)."""
        with self._lock:
            subs = [s for s in self._subs if not s.dropped]
            for sub in subs:
                sub.feed_lost = reason
                sub.dropped = True
        if subs:
            self.metrics.watchers_dropped.inc(len(subs))
            log.warning("ending %d WatchEvents streams: %s", len(subs), reason)

    def pause(self, reason: str) -> None:
        """The feed is down: end open streams and refuse new ones until resume()."""
        with self._lock:
            self._paused = reason or "event feed down"
        self.interrupt(reason)

    def resume(self) -> None:
        """The feed is back: accept streams again."""
        with self._lock:
            was, self._paused = self._paused, ""
        if was:
            log.info("event feed is back; WatchEvents streams accepted again")

    def close(self) -> None:
        """Tell every watcher to end."""
        with self._lock:
            for sub in self._subs:
                sub.closed = True
