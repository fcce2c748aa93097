"""Fan-out of newly stored events to WatchEvents streams, each with a bounded queue.

The store feeds the hub: SQLite straight from its writer, PostgreSQL from a LISTEN connection
that hears every replica's commits (postgres_feed). When that feed breaks, events may have been
missed, so every open stream is ended (UNAVAILABLE: reconnect, re-query) and new ones are
refused until the feed is back: a watcher never silently misses an event.

The streams live on the server's event loop; the feed publishes from its own thread. One
hand-over to the loop per commit, however many watchers there are; the loop then fills each
watcher's queue without ever waiting for a slow one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable

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
        self.size = size
        self.queue: deque[analytics_pb2.Event] = deque()
        self.dropped = False
        self.feed_lost = ""  # why the feed broke, when that ended this stream
        self.closed = False
        self._wake = asyncio.Event()

    def wants(self, ev: analytics_pb2.Event) -> bool:
        """Whether the event passes this watcher's filter."""
        return (not self.camera_id or ev.camera_id == self.camera_id) and (
            not self.label or ev.label == self.label
        )

    def offer(self, events: list[analytics_pb2.Event]) -> bool:
        """Queue the wanted events (on the loop); False when this made the watcher fall behind."""
        if self.dropped or self.closed:
            return True
        for ev in events:
            if not self.wants(ev):
                continue
            if len(self.queue) >= self.size:
                self.dropped = True
                self._wake.set()
                return False
            self.queue.append(ev)
        self._wake.set()
        return True

    def close(self) -> None:
        """End the stream after what is queued (on the loop)."""
        self.closed = True
        self._wake.set()

    def wake(self) -> None:
        """Let the stream look at its flags again (on the loop)."""
        self._wake.set()

    async def events(self) -> AsyncIterator[analytics_pb2.Event]:
        """Queued events as they come, until closed or dropped."""
        while True:
            while self.queue:
                yield self.queue.popleft()
            if self.dropped or self.closed:
                return
            self._wake.clear()
            await self._wake.wait()


class WatchHub:
    """Publishes committed events to every matching subscription without ever blocking."""

    def __init__(self, metrics: CloudMetrics, max_watchers: int, queue_size: int) -> None:
        self.metrics = metrics
        self.max_watchers = max_watchers
        self.queue_size = queue_size
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()
        self._paused = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    def subscribe(self, camera_id: str, label: str) -> Subscription | None:
        """A new subscription (call on the server's loop), or None when max_watchers are open.
        Raises WatchUnavailableError while the feed is down."""
        with self._lock:
            if self._paused:
                raise WatchUnavailableError(self._paused)
            if len(self._subs) >= self.max_watchers:
                return None
            self._loop = asyncio.get_running_loop()
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
        """Offer events to every watcher (from any thread); one that is full is dropped."""
        with self._lock:
            loop = self._loop if self._subs else None
        if loop is not None:
            self._call(loop, self._deliver, list(events))

    def _deliver(self, events: list[analytics_pb2.Event]) -> None:
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            if not sub.offer(events):
                self.metrics.watchers_dropped.inc()
                log.warning("a WatchEvents stream fell %d events behind; closing it", sub.size)

    def interrupt(self, reason: str) -> None:
        """Events may have been missed: end every open stream (each reconnects)."""
        with self._lock:
            subs = [s for s in self._subs if not s.dropped]
            for sub in subs:
                sub.feed_lost = reason
                sub.dropped = True
            loop = self._loop
        if subs:
            self.metrics.watchers_dropped.inc(len(subs))
            log.warning("ending %d WatchEvents streams: %s", len(subs), reason)
            if loop is not None:
                self._call(loop, self._each, subs, Subscription.wake)

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
        """Tell every watcher to end (from any thread)."""
        with self._lock:
            subs = list(self._subs)
            loop = self._loop
        if loop is not None and subs:
            self._call(loop, self._each, subs, Subscription.close)

    @staticmethod
    def _each(subs: list[Subscription], fn: Callable[[Subscription], None]) -> None:
        for sub in subs:
            fn(sub)

    @staticmethod
    def _call(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server stopped, nobody is watching
            pass
