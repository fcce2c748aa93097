"""Fan-out of newly stored events to WatchEvents and WatchTrackEvents streams, each with a
bounded queue.

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
from typing import Any, Generic, TypeVar

import grpc
from strata.shared.contracts import analytics_pb2, events_pb2

from ..metrics import CloudMetrics
from ..store.event_rows import object_label
from ..store.track_filter import TrackQuery, parse_track_uid

M = TypeVar("M", analytics_pb2.Event, events_pb2.StoredTrackEvent)

log = logging.getLogger(__name__)


class WatchUnavailableError(RuntimeError):
    """The event feed is down; a new stream could miss events."""


def crop_filter(
    camera_id: str = "", label: str = "", track_id: int = 0, track_uid: str = ""
) -> Callable[[analytics_pb2.Event], bool]:
    """WatchEvents' test of a classified crop; `track_uid` (ValueError if malformed) keeps the
    crops of that tracker id captured since the track was first seen."""
    first_seen = 0
    if track_uid:
        first_seen, track_id = parse_track_uid(track_uid)

    def wants(ev: analytics_pb2.Event) -> bool:
        return (
            (not camera_id or ev.camera_id == camera_id)
            and (not label or object_label(ev) == label)
            and (not track_id or ev.track_id == track_id)
            and ev.capture_ns >= first_seen
        )

    return wants


class Subscription(Generic[M]):
    """One watcher: a filter and a bounded queue; `dropped` (with a reason) once it fell
    behind or the feed broke."""

    def __init__(self, wants: Callable[[M], bool], size: int) -> None:
        self.wants: Callable[[M], bool] = wants
        self.size = size
        self.queue: deque[M] = deque()
        self.dropped = False
        self.feed_lost = ""  # why the feed broke, when that ended this stream
        self.closed = False
        self._wake = asyncio.Event()

    def offer(self, events: list[M]) -> bool:
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

    async def events(self) -> AsyncIterator[M]:
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
        self._subs: list[Subscription[analytics_pb2.Event]] = []
        self._track_subs: list[Subscription[events_pb2.StoredTrackEvent]] = []
        self._lock = threading.Lock()
        self._paused = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    def subscribe(
        self, camera_id: str, label: str, track_id: int = 0, track_uid: str = ""
    ) -> Subscription[analytics_pb2.Event] | None:
        """A new WatchEvents subscription (call on the server's loop), or None when
        max_watchers are open. Raises WatchUnavailableError while the feed is down."""
        wants = crop_filter(camera_id, label, track_id, track_uid)
        return self._add(self._subs, Subscription(wants, self.queue_size))

    def subscribe_tracks(self, q: TrackQuery) -> Subscription[events_pb2.StoredTrackEvent] | None:
        """A new WatchTrackEvents subscription, as subscribe()."""
        return self._add(self._track_subs, Subscription(q.matches, self.queue_size))

    def _add(self, subs: list[Subscription[M]], sub: Subscription[M]) -> Subscription[M] | None:
        with self._lock:
            if self._paused:
                raise WatchUnavailableError(self._paused)
            if len(self._subs) + len(self._track_subs) >= self.max_watchers:
                return None
            self._loop = asyncio.get_running_loop()
            subs.append(sub)
            self.metrics.watchers.set(len(self._subs) + len(self._track_subs))
            return sub

    def unsubscribe(self, sub: Subscription[Any]) -> None:
        """Forget a subscription."""
        with self._lock:
            for subs in (self._subs, self._track_subs):
                if sub in subs:
                    subs.remove(sub)
            self.metrics.watchers.set(len(self._subs) + len(self._track_subs))

    def publish(self, events: list[analytics_pb2.Event]) -> None:
        """Offer events to every watcher (from any thread); one that is full is dropped."""
        with self._lock:
            loop = self._loop if self._subs else None
        if loop is not None:
            self._call(loop, self._deliver, self._subs, list(events))

    def publish_tracks(self, events: list[events_pb2.StoredTrackEvent]) -> None:
        """Offer track events to every track watcher (from any thread), as publish()."""
        with self._lock:
            loop = self._loop if self._track_subs else None
        if loop is not None:
            self._call(loop, self._deliver, self._track_subs, list(events))

    def _deliver(self, subs: list[Subscription[M]], events: list[M]) -> None:
        with self._lock:
            subs = list(subs)
        for sub in subs:
            if not sub.offer(events):
                self.metrics.watchers_dropped.inc()
                log.warning("a watch stream fell %d events behind; closing it", sub.size)

    def interrupt(self, reason: str) -> None:
        """Events may have been missed: end every open stream (each reconnects)."""
        with self._lock:
            every: list[Subscription[Any]] = [*self._subs, *self._track_subs]
            subs = [s for s in every if not s.dropped]
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
            subs = [*self._subs, *self._track_subs]
            loop = self._loop
        if loop is not None and subs:
            self._call(loop, self._each, subs, Subscription.close)

    @staticmethod
    def _each(subs: list[Subscription[Any]], fn: Callable[[Subscription[Any]], None]) -> None:
        for sub in subs:
            fn(sub)

    @staticmethod
    def _call(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server stopped, nobody is watching
            pass


# (method, reason, detail): a refused or ended watch, counted and logged by the service.
Drops = Callable[[str, str, str], None]


async def watched(
    subscribe: Callable[[], Subscription[M] | None],
    hub: WatchHub,
    context: grpc.aio.ServicerContext[Any, Any],
    method: str,
    drops: Drops,
) -> AsyncIterator[M]:
    """The events of the subscription `subscribe` opens, relayed; a call that cannot have one
    is aborted with why, counted: a bad filter (ValueError), the feed down, max_watchers open."""
    try:
        sub = subscribe()
    except ValueError as exc:
        drops(method, "bad_request", str(exc))
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except WatchUnavailableError as exc:
        drops(method, "feed_lost", str(exc))
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"event feed down, retry: {exc}")
    if sub is None:
        drops(method, "too_many_watchers", f"limit {hub.max_watchers}")
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"too many {method} streams")
    assert sub is not None
    async for ev in relay(sub, hub, context, method, drops):
        yield ev


async def relay(
    sub: Subscription[M],
    hub: WatchHub,
    context: grpc.aio.ServicerContext[Any, Any],
    method: str,
    drops: Drops,
) -> AsyncIterator[M]:
    """A subscription's events to its stream until the client goes; a stream the feed or
    its own backlog ended is aborted with why (the client reconnects), counted."""
    # The header goes out now, so a client knows it is subscribed before events arrive.
    await context.send_initial_metadata(())
    try:
        async for ev in sub.events():
            yield ev
    finally:
        hub.unsubscribe(sub)
    if sub.feed_lost:
        drops(method, "feed_lost", sub.feed_lost)
        reason = f"events may have been missed; reconnect: {sub.feed_lost}"
        await context.abort(grpc.StatusCode.UNAVAILABLE, reason)
    if sub.dropped:
        drops(method, "watcher_behind", "stream fell behind and was closed")
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "watcher fell behind; reconnect")
