"""New events as server-sent events, fed from the store's commit feed (the WatchHub).

One stream per open list page: a crop subscription and a track-event subscription on the
hub, filtered as the page is, merged into one queue. A watcher that falls behind, or a feed
that breaks, ends the stream with a `reset` event: the page reloads and re-queries, so it
never silently misses an event (the WatchEvents promise).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from strata.shared.contracts import analytics_pb2, events_pb2

from ..api.watch import Subscription, WatchHub
from .queries import EventFilter

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
Item = analytics_pb2.Event | events_pb2.StoredTrackEvent
# Turns a batch of new items into JSON records (snapshot lookups run on the executor).
Render = Callable[[list[Item]], Awaitable[list[dict[str, Any]]]]


def crop_wanted(f: EventFilter, ev: analytics_pb2.Event) -> bool:
    """The list filter's test of a new classified crop (the hub tests camera and label)."""
    t = ev.capture_ns or ev.stored_ns
    return f.wants_crops and t >= f.start_ns and (not f.end_ns or t < f.end_ns)


class LiveFeed:
    """Subscribes a page's filter to the hub; iterate `stream()` for SSE text."""

    def __init__(self, hub: WatchHub, f: EventFilter, closing: asyncio.Event) -> None:
        self.hub = hub
        self.filter = f
        self.closing = closing
        self.subs: list[Subscription[Any]] = []

    def open(self) -> bool:
        """Subscribe (on the loop); False when the hub has no room. Raises
        WatchUnavailableError while the feed is down."""
        f = self.filter
        if f.wants_crops:
            sub = self.hub.subscribe(f.camera, f.label)
            if sub is None:
                return False
            self.subs.append(sub)
        if f.wants_tracks:
            tsub = self.hub.subscribe_tracks(f.track_query())
            if tsub is None:
                self.close()
                return False
            self.subs.append(tsub)
        return True

    def close(self) -> None:
        """Unsubscribe everything."""
        for sub in self.subs:
            self.hub.unsubscribe(sub)
        self.subs.clear()

    async def _pump(self, sub: Subscription[Any], out: asyncio.Queue[Item | None]) -> None:
        async for item in sub.events():
            await out.put(item)
        await out.put(None)  # this subscription ended: fell behind, feed lost, or closing

    async def stream(self, render: Render) -> AsyncIterator[str]:
        """SSE text: `event` records as they commit, keepalive comments, and `reset` when the
        stream had to end before the client left."""
        out: asyncio.Queue[Item | None] = asyncio.Queue()
        tasks = [asyncio.create_task(self._pump(s, out)) for s in self.subs]
        closing = asyncio.create_task(self.closing.wait())
        getter: asyncio.Task[Item | None] | None = None
        try:
            yield "retry: 3000\n\n"
            while True:
                getter = asyncio.create_task(out.get())
                done, _ = await asyncio.wait(
                    {getter, closing}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if closing in done:
                    getter.cancel()
                    yield 'event: reset\ndata: {"reason": "server stopping"}\n\n'
                    return
                if getter not in done:
                    getter.cancel()
                    yield ": keepalive\n\n"
                    continue
                first = getter.result()
                batch = [first]
                while not out.empty():
                    batch.append(out.get_nowait())
                items = [i for i in batch if i is not None]
                items = [
                    i
                    for i in items
                    if not isinstance(i, analytics_pb2.Event) or crop_wanted(self.filter, i)
                ]
                if items:
                    for record in await render(items):
                        yield f"event: event\ndata: {json.dumps(record)}\n\n"
                if any(i is None for i in batch):
                    reason = next((s.feed_lost for s in self.subs if s.feed_lost), "fell behind")
                    yield f"event: reset\ndata: {json.dumps({'reason': reason})}\n\n"
                    return
        finally:
            closing.cancel()
            if getter is not None:
                getter.cancel()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            self.close()
