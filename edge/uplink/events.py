"""The uplink's track events (edge/uplink/stream.py, its module docstring says how they
are promised): written through to the spool, a window in memory, one batch per camera in
flight, settled by the cloud's acks."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque

from strata.edge.uplink.inflight import (
    EventPending,
    QueuedEvent,
    UplinkParts,
    UplinkStream,
)
from strata.edge.uplink.spool import Appended
from strata.shared.contracts import analytics_pb2, events_pb2

log = logging.getLogger(__name__)


# Most track events per CropBatch (the cloud refuses more than its max_events_per_batch,
# 256 by default).
EVENTS_PER_BATCH = 128
# A cloud older than protocol 2.1 acks no event: events wait this long before trying again.
OLD_CLOUD_PAUSE_S = 30.0
FINAL = {
    events_pb2.TRACK_EVENT_STATUS_STORED: "stored",
    events_pb2.TRACK_EVENT_STATUS_DUPLICATE: "duplicate",
}


class EventPayload(UplinkParts):
    """Track events: offered, taken per camera in order, acked, requeued."""

    def offer_events(self, events: list[events_pb2.TrackEvent]) -> None:
        """Hand track events to the cloud, in order (each camera's in its `sequence` order).
        With a spool they are on disk when this returns (one transaction), so a kill loses
        none; memory takes them while it has room and nothing older waits on disk. Without
        a spool, beyond the memory bound the oldest drop, counted."""
        if not events:
            return
        self.metrics.uplink_events.labels("offered").inc(len(events))
        dropped = 0
        with self._cond:
            if self._spool is not None:
                try:
                    done = self._spool.append_events(events)
                except sqlite3.Error as exc:
                    log.error("uplink spool %s failed: %s", self._spool.path, exc)
                    self._events_dropped("uplink_spool_error", len(events))
                    return
                self._appended(events, done)
            else:
                for ev in events:
                    if len(self._evbuf) >= self.cfg.queue:
                        self._evbuf.popleft()
                        dropped += 1
                    self._ev_order += 1
                    self._evbuf.append(QueuedEvent(ev, self._ev_order))
            self._gauges()
            self._cond.notify()
        if dropped:
            self._events_dropped("event_buffer_full", dropped)

    def _appended(self, events: list[events_pb2.TrackEvent], done: Appended) -> None:
        """Events written to the spool: into memory too while it has room and no older row
        waits on disk only (lock held); what the spool dropped or refused, counted."""
        self.metrics.uplink_events.labels("spooled").inc(len(done.rows))
        for ev, row in zip(events, done.rows, strict=False):
            if self._ev_unloaded or len(self._evbuf) >= self.cfg.queue:
                self._ev_unloaded += 1
            else:
                self._evbuf.append(QueuedEvent(ev, row))
                self._ev_loaded = row
        if done.crops_dropped:
            # Said apart from uplink_spool_full: these crops made room for track events.
            self._dropped("uplink_spool_full_events", done.crops_dropped)
        if done.snapshots_dropped:
            self._snaps.trimmed("uplink_spool_full_events", done.snapshots_dropped)
        if done.refused:
            self._events_dropped("uplink_spool_full", done.refused)

    def _events_dropped(self, reason: str, n: int) -> None:
        self.metrics.uplink_event_drops.labels(reason).inc(n)
        log.warning(
            "dropped %d track events (%s): memory %d, spool %s; breaker %s",
            n,
            reason,
            self.cfg.queue,
            f"{self.cfg.spool_max_mib:g} MiB" if self._spool is not None else "off",
            self.breaker.state.name,
        )

    @property
    def events_buffered(self) -> int:
        """Track events waiting to be sent: in memory and on disk only (not in flight)."""
        with self._cond:
            return len(self._evbuf) + self._ev_unloaded + self._ev_in_hand

    @property
    def events_waiting(self) -> int:
        """Track events not yet acked final: waiting to be sent and in flight."""
        with self._cond:
            flying = sum(len(v) for s in self._streams for v in s.events.values())
            return flying + len(self._evbuf) + self._ev_unloaded + self._ev_in_hand

    @property
    def events_spooled(self) -> int:
        """Track events on disk (every one not yet acked final, with a spool)."""
        with self._cond:
            return self._spool.events if self._spool is not None else 0

    def _take_events(self) -> list[QueuedEvent]:
        """Events of cameras with none in flight and no RETRY pause, each camera's a prefix
        of its queue, at most EVENTS_PER_BATCH (lock held). A camera left out for any reason
        has all its later events left too, so none overtakes another."""
        now = time.monotonic()
        if not self._evbuf or now < self._events_paused_until:
            return []
        self._ev_hold = {c: t for c, t in self._ev_hold.items() if t > now}
        blocked = set(self._ev_hold)
        for st in self._streams:
            for plist in st.events.values():
                blocked.update(p.ev.event.camera_id for p in plist)
        taken: list[QueuedEvent] = []
        keep: deque[QueuedEvent] = deque()
        for e in self._evbuf:
            if len(taken) < EVENTS_PER_BATCH and e.event.camera_id not in blocked:
                taken.append(e)
            else:
                keep.append(e)
                blocked.add(e.event.camera_id)
        if taken:
            self._evbuf = keep
        return taken

    def _unacked_events(self, streams: list[UplinkStream]) -> list[EventPending]:
        """The streams' events in flight, in the order they were offered."""
        return sorted(
            (p for s in streams for plist in s.events.values() for p in plist),
            key=lambda p: p.ev.order,
        )

    def _refill_events(self) -> None:
        """Read the next track events from the spool into memory when it runs low (lock
        held); their rows stay until final."""
        if self._spool is None or not self._ev_unloaded:
            return
        if len(self._evbuf) > self.cfg.queue // 2:
            return
        try:
            rows, bad = self._spool.load_events(self._ev_loaded, self.cfg.queue - len(self._evbuf))
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self._spool.path, exc)
            return
        for row, ev in rows:
            self._evbuf.append(QueuedEvent(ev, row))
            self._ev_loaded = row
        self._ev_unloaded = max(0, self._ev_unloaded - len(rows) - bad)
        if bad:
            self._events_dropped("uplink_spool_corrupt", bad)

    def _requeue_events(self, events: list[QueuedEvent]) -> None:
        """Back to the front, in the order offered: each camera's unacked events are its
        oldest. Memory may pass its bound by what was in flight (one batch per camera)."""
        if not events:
            return
        with self._cond:
            self._evbuf.extendleft(reversed(events))
            self._gauges()
            self._cond.notify()

    def _on_event_acks(
        self, stream: UplinkStream, resp: analytics_pb2.UplinkResponse, now: float
    ) -> None:
        """Settle the stream's track events the response acks: final, or back to the front
        of their camera's queue with the camera held for the cloud's retry_after_ms."""
        if resp.version.minor < 1:
            self._old_cloud(stream, resp)
            return
        retry: list[EventPending] = []
        final: list[EventPending] = []
        for ack in resp.event_acks:
            with self._cond:
                plist = stream.events.get(ack.idempotency_key)
                p = plist.pop(0) if plist else None
                if plist is not None and not plist:
                    del stream.events[ack.idempotency_key]
            if p is None:
                continue
            status = FINAL.get(ack.status)
            if status is not None:
                self.metrics.uplink_events.labels(status).inc()
                final.append(p)
            elif ack.status == events_pb2.TRACK_EVENT_STATUS_INVALID:
                self.metrics.uplink_events.labels("invalid").inc()
                self.metrics.uplink_event_drops.labels("event_invalid").inc()
                log.warning("cloud rejected track event %s: %s", ack.idempotency_key, ack.reason)
                final.append(p)
            else:  # RETRY, or a status this build does not know: keep it
                self.metrics.uplink_events.labels("retry").inc()
                retry.append(p)
                camera = p.ev.event.camera_id
                until = now + ack.retry_after_ms / 1e3
                with self._cond:
                    self._ev_hold[camera] = max(self._ev_hold.get(camera, 0.0), until)
        if final:
            self._forget([p.ev for p in final])
            p = final[0]
            self.breaker.success(now - p.sent, probe=any(q.probe for q in final))
        if retry:
            self.breaker.failure(
                "cloud busy: track events got RETRY", probe=any(q.probe for q in retry)
            )
            self._requeue_events([p.ev for p in sorted(retry, key=lambda q: q.ev.order)])
        elif final:
            with self._cond:
                self._cond.notify()  # the cameras may send their next events now

    def _forget(self, done: list[QueuedEvent]) -> None:
        """Final events leave the spool (their rows); a failure there only means they are
        sent again after a restart, and the cloud acks those DUPLICATE."""
        if self._spool is None:
            return
        try:
            self._spool.delete_events([e.order for e in done])
        except sqlite3.Error as exc:
            log.error("uplink spool %s: acked track events not removed: %s", self._spool.path, exc)
        with self._cond:
            self._gauges()

    def _old_cloud(self, stream: UplinkStream, resp: analytics_pb2.UplinkResponse) -> None:
        """A cloud older than protocol 2.1 ignores track events: they go back and wait, and
        none go out for OLD_CLOUD_PAUSE_S after its last answer. (An events-only batch gets
        no answer from it at all: the ack timeout puts those back.)"""
        now = time.monotonic()
        with self._cond:
            events = self._unacked_events([stream])
            stream.events.clear()
        was_paused = now < self._events_paused_until
        self._events_paused_until = now + OLD_CLOUD_PAUSE_S
        if not events and was_paused:
            return
        log.warning(
            "cloud %s speaks protocol %d.%d, before track events (2.1): %d event(s) wait "
            "for a newer cloud (tried again %.0f s after its last answer)",
            self.target,
            resp.version.major,
            resp.version.minor,
            len(events),
            OLD_CLOUD_PAUSE_S,
        )
        self._requeue_events([p.ev for p in events])
