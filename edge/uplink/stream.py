"""Crops, track events and track snapshots to the cloud over bidirectional Uplink streams,
behind a circuit breaker.

Crops wait in a bounded memory buffer; beyond it they spill, in order, to a bounded on-disk
spool (edge/uplink/spool.py) that drains back through the buffer when the cloud returns,
so an outage the spool can hold loses nothing. Beyond the spool's bound the oldest are
dropped and counted.

Track events (docs/events.md) ride the same CropBatch (`events`). They are promised, so
with a spool each is written to it when offered (before its frame is settled) and its row
goes only when the cloud's ack is final: a `kill -9` loses none, the next start sends them
again (the cloud acks a copy DUPLICATE). Memory holds a window of them, read from the spool
in order; the spool drops crops before any event. A camera's events keep their order: at
most one batch of a camera's events is in flight at a time, on one stream, so the cloud
hands them to its store in order; a RETRY (or a stream break, an ack timeout) puts the
camera's unacked events back at the front and holds its later ones until they are taken.
STORED and DUPLICATE are final, INVALID is final (counted, logged, never resent), RETRY
waits `retry_after_ms`. Without a spool, events wait in memory only.

Track snapshots (JPEGs of a track's best crop and full frame) ride the same batches
(`snapshots`), queued by edge/uplink/snapshots.py: written through to the spool like events
(a kill -9 loses none), dropped there before any event, acked one by one, put back on RETRY
or a broken stream.

One thread sends batches over up to `streams` streams while the breaker allows; each stream
has a thread reading its acks. On a target with several addresses (a DNS name or a list) the
channel's round_robin policy puts each stream on the next endpoint. A broken stream, an ack
timeout or an unreachable cloud count as failures; the crops in flight go back to the front of
the buffer. While the breaker is open nothing is sent; after `open_s` one batch probes.

TLS (server CA), mTLS (client certificate) and a bearer token match the cloud's options.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.breaker import BreakerState, CircuitBreaker
from strata.edge.uplink.snapshots import SnapshotQueue
from strata.edge.uplink.spool import Appended, CropSpool, SpoolError
from strata.shared.config.edge import UplinkConfig, cloud_target
from strata.shared.contracts import analytics_pb2, check_version, current_version, events_pb2

log = logging.getLogger(__name__)

_CLOSE = object()
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# Statuses of the connect check that still prove the cloud is there and talks to us.
_REACHABLE = (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED)
# Most track events per CropBatch (the cloud refuses more than its max_events_per_batch,
# 256 by default).
EVENTS_PER_BATCH = 128
# A cloud older than protocol 2.1 acks no event: events wait this long before trying again.
OLD_CLOUD_PAUSE_S = 30.0
_FINAL = {
    events_pb2.TRACK_EVENT_STATUS_STORED: "stored",
    events_pb2.TRACK_EVENT_STATUS_DUPLICATE: "duplicate",
}


@dataclass(frozen=True, slots=True)
class _Batch:
    """What one CropBatch carries out."""

    crops: list[analytics_pb2.Crop]
    events: list[_Ev]
    snapshots: list[events_pb2.Snapshot]

    @property
    def empty(self) -> bool:
        return not (self.crops or self.events or self.snapshots)


class UplinkSetupError(ValueError):
    """A TLS or token file of the uplink cannot be read."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UplinkSetupError(f"cannot read the uplink's {what} {path}: {exc.strerror}") from exc


@dataclass(slots=True)
class _Pending:
    crop: analytics_pb2.Crop
    sent: float
    probe: bool


@dataclass(frozen=True, slots=True)
class _Ev:
    """A track event waiting for its final ack, and its place: its spool row (with a
    spool; increasing in the order offered), else a counter."""

    event: events_pb2.TrackEvent
    order: int


@dataclass(slots=True)
class _EventPending:
    ev: _Ev
    sent: float
    probe: bool


@dataclass(slots=True)
class _SnapPending:
    snap: events_pb2.Snapshot
    sent: float
    probe: bool


@dataclass(eq=False)
class _Stream:
    call: Any
    requests: queue.SimpleQueue[Any]
    opened: float
    pending: dict[str, _Pending] = field(default_factory=dict)
    # Track events in flight by idempotency key (a replayed event may be there twice).
    events: dict[str, list[_EventPending]] = field(default_factory=dict)
    # Track snapshots in flight by snapshot id.
    snapshots: dict[str, _SnapPending] = field(default_factory=dict)
    draining: bool = False  # past its age: no new batches; closed once its acks are in


class Uplink:
    """Owns the gRPC channel, the streams, the crop and event buffers and spool, and the
    breaker."""

    def __init__(self, target: str | list[str], cfg: UplinkConfig, metrics: EdgeMetrics) -> None:
        self.target = cloud_target(target)
        self.cfg = cfg
        self.metrics = metrics
        self.breaker = CircuitBreaker(
            cfg.failure_threshold,
            cfg.p99_limit_ms / 1e3,
            cfg.latency_window,
            cfg.open_s,
            on_change=self._on_breaker,
            close_ratio=cfg.close_ratio,
            min_samples=cfg.min_latency_samples,
        )
        metrics.breaker_state.set(BreakerState.CLOSED)
        self._credentials = self._channel_credentials()
        self._metadata: tuple[tuple[str, str], ...] = ()
        if cfg.token_file:
            token = _read(cfg.token_file, "token file").decode().strip()
            if not token:
                raise UplinkSetupError(f"the uplink's token file {cfg.token_file} is empty")
            self._metadata = (("authorization", f"Bearer {token}"),)
            if self._credentials is None:
                log.warning("uplink sends its bearer token without TLS to %s", self.target)
        self._spool = (
            CropSpool(cfg.spool_path, int(cfg.spool_max_mib * 1024 * 1024))
            if cfg.spool_path
            else None
        )
        self._buf: deque[analytics_pb2.Crop] = deque()
        self._snaps = SnapshotQueue(cfg.snapshot_queue, self._spool, metrics, self._dropped)
        # Track events in the order offered (each camera's in its order). With a spool every
        # one is on disk; memory holds the rows up to _ev_loaded (and in flight), the
        # _ev_unloaded rows after them wait on disk only.
        self._evbuf: deque[_Ev] = deque()
        self._ev_loaded = -(2**62)
        self._ev_unloaded = self._spool.events if self._spool is not None else 0
        self._ev_order = 0  # without a spool
        self._ev_in_hand = 0  # taken by the sender, not yet in flight
        self._ev_hold: dict[str, float] = {}  # camera -> monotonic time its RETRY ends
        self._events_paused_until = 0.0  # an old cloud that acks no event
        self._cond = threading.Condition()
        self._streams: list[_Stream] = []
        self._stop = threading.Event()
        self._channel: grpc.Channel | None = None
        # The cloud asked for a pause (CROP_STATUS_RETRY with retry_after_ms) until then.
        self._retry_until = 0.0
        self._thread = threading.Thread(target=self._run, name="edge-uplink", daemon=True)
        self._gauges()

    def _channel_credentials(self) -> grpc.ChannelCredentials | None:
        tls = self.cfg.tls
        if not tls.on:
            return None
        ca = _read(tls.ca_file, "CA file") if tls.ca_file else None
        key = _read(tls.key_file, "client key") if tls.key_file else None
        cert = _read(tls.cert_file, "client certificate") if tls.cert_file else None
        return grpc.ssl_channel_credentials(ca, key, cert)

    def _on_breaker(self, old: BreakerState, new: BreakerState) -> None:
        self.metrics.breaker_state.set(int(new))
        if old is BreakerState.CLOSED and new is BreakerState.OPEN:
            self.metrics.breaker_trips.inc()

    def start(self) -> None:
        self._thread.start()

    # -- the buffer and the spool ----------------------------------------------------------

    def offer(self, crops: list[analytics_pb2.Crop]) -> None:
        """Buffer crops for the cloud; never waits for the network. Beyond the memory bound
        they spill to the spool (in order); beyond both, the oldest drop, counted."""
        if not crops:
            return
        # Every crop handed over: offered = stored + invalid + dropped (by reason), in the end.
        self.metrics.crops.labels("offered").inc(len(crops))
        with self._cond:
            if self._spool is not None:
                # Memory takes crops only while nothing waits on disk, so order holds.
                room = self.cfg.queue - len(self._buf) if not len(self._spool) else 0
                self._buf.extend(crops[: max(0, room)])
                spill = crops[max(0, room) :]
                if spill:
                    self._to_spool(spill, front=False)
                dropped = 0
            else:
                dropped = 0
                for c in crops:
                    if len(self._buf) >= self.cfg.queue:
                        self._buf.popleft()
                        dropped += 1
                    self._buf.append(c)
            self._gauges()
            self._cond.notify()
        if dropped:
            self._dropped("crop_buffer_full", dropped)

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
                    self._evbuf.append(_Ev(ev, self._ev_order))
            self._gauges()
            self._cond.notify()
        if dropped:
            self._events_dropped("event_buffer_full", dropped)

    def offer_snapshots(self, snaps: list[events_pb2.Snapshot]) -> None:
        """Hand track snapshots to the cloud; never waits for the network. With a spool they
        are on disk when this returns (one transaction), where they drop before any event
        (counted)."""
        if not snaps:
            return
        self._snaps.offer(snaps)
        with self._cond:
            self._cond.notify()

    @property
    def snapshots_waiting(self) -> int:
        """Track snapshots not yet acked final: waiting (memory, disk) and in flight."""
        with self._cond:
            flying = sum(len(s.snapshots) for s in self._streams)
        return flying + len(self._snaps)

    def _appended(self, events: list[events_pb2.TrackEvent], done: Appended) -> None:
        """Events written to the spool: into memory too while it has room and no older row
        waits on disk only (lock held); what the spool dropped or refused, counted."""
        self.metrics.uplink_events.labels("spooled").inc(len(done.rows))
        for ev, row in zip(events, done.rows, strict=False):
            if self._ev_unloaded or len(self._evbuf) >= self.cfg.queue:
                self._ev_unloaded += 1
            else:
                self._evbuf.append(_Ev(ev, row))
                self._ev_loaded = row
        if done.crops_dropped:
            # Said apart from uplink_spool_full: these crops made room for track events.
            self._dropped("uplink_spool_full_events", done.crops_dropped)
        if done.snapshots_dropped:
            self._snaps.trimmed("uplink_spool_full_events", done.snapshots_dropped)
        if done.refused:
            self._events_dropped("uplink_spool_full", done.refused)

    def adopt_spool(self, path: str, peer: str, counter: Any) -> threading.Thread | None:
        """Move a failed peer's spooled track events, track snapshots and crops into this
        uplink, in order, in the background (a thread; returned). Only with a spool of our
        own, so nothing the memory buffer cannot hold is dropped; the peer's spool lock
        keeps a live peer's crops where they are (logged)."""
        if self._spool is None:
            log.warning(
                "edge %s left crops in %s: not taken over (this edge has no uplink spool)",
                peer,
                path,
            )
            return None
        if not Path(path).exists() or Path(path).resolve() == Path(self._spool.path).resolve():
            return None
        t = threading.Thread(
            target=self._drain_peer,
            args=(path, peer, counter),
            name="edge-spool-adopt",
            daemon=True,
        )
        t.start()
        return t

    def _drain_peer(self, path: str, peer: str, counter: Any) -> None:
        try:
            other = CropSpool(path, int(self.cfg.spool_max_mib * 1024 * 1024))
        except SpoolError as exc:
            log.info("uplink spool of edge %s not taken over: %s", peer, exc)
            return
        moved = lost = events = snaps = 0
        try:
            # Events first: small, and a moved camera's events should precede what its
            # restored rules emit here; then the snapshots they name.
            while not self._stop.is_set():
                evs, bad = other.pop_events(self.cfg.queue)
                if bad:
                    self._events_dropped("uplink_spool_corrupt", bad)
                if not evs:
                    break
                self.offer_events(evs)
                self.metrics.uplink_events.labels("adopted").inc(len(evs))
                events += len(evs)
            while not self._stop.is_set():
                shots, bad = other.pop_snapshots(self.cfg.snapshot_queue)
                if bad:
                    self._snaps.dropped("uplink_spool_corrupt", bad)
                if not shots:
                    break
                self.offer_snapshots(shots)
                snaps += len(shots)
            while not self._stop.is_set():
                crops, bad = other.pop(self.cfg.queue)
                lost += bad
                if not crops:
                    break
                self.offer(crops)  # spills to our spool in order beyond the memory buffer
                moved += len(crops)
                counter.inc(len(crops))
        except (sqlite3.Error, OSError) as exc:
            log.error("uplink spool %s of edge %s: stopped taking it over: %s", path, peer, exc)
        finally:
            other.close()
        if lost:
            self._dropped("uplink_spool_corrupt", lost)
        log.warning(
            "took over %d crop(s), %d track event(s) and %d track snapshot(s) of edge %s "
            "from its spool %s",
            moved,
            events,
            snaps,
            peer,
            path,
        )

    def _to_spool(self, crops: list[analytics_pb2.Crop], front: bool) -> None:
        """Write crops to the spool (caller holds the lock); failures and overflow counted."""
        assert self._spool is not None
        try:
            over = self._spool.push(crops, front=front)
        except sqlite3.Error as exc:
            log.error("uplink spool %s failed: %s", self._spool.path, exc)
            self._dropped("uplink_spool_error", len(crops))
            return
        if over:
            self._dropped("uplink_spool_full", over)

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

    def _dropped(self, reason: str, n: int) -> None:
        self.metrics.drops.labels(reason).inc(n)
        log.warning(
            "dropped %d crops (%s%s): memory %d, spool %s; breaker %s",
            n,
            reason,
            ", to keep track events" if reason == "uplink_spool_full_events" else "",
            self.cfg.queue,
            f"{self.cfg.spool_max_mib:g} MiB" if self._spool is not None else "off",
            self.breaker.state.name,
        )

    def _gauges(self) -> None:
        self.metrics.crop_queue.set(len(self._buf))
        self.metrics.uplink_event_queue.set(len(self._evbuf))
        if self._spool is not None:
            self.metrics.spool_crops.set(len(self._spool))
            self.metrics.spool_events.set(self._spool.events)
            self.metrics.spool_bytes.set(self._spool.bytes)

    @property
    def buffered(self) -> int:
        """Crops waiting for the cloud, in memory and on disk."""
        with self._cond:
            return len(self._buf) + (len(self._spool) if self._spool is not None else 0)

    @property
    def waiting(self) -> int:
        """Crops not yet acked: in memory, on disk and in flight."""
        with self._cond:
            flying = sum(len(s.pending) for s in self._streams)
            return flying + len(self._buf) + (len(self._spool) if self._spool is not None else 0)

    @property
    def spooled(self) -> int:
        """Crops waiting on disk."""
        with self._cond:
            return len(self._spool) if self._spool is not None else 0

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

    def stop(self) -> None:
        """Stop sending; what is still unacked or buffered goes to the spool for next time."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=5)
        with self._cond:
            streams, self._streams = self._streams, []
            unacked = sorted((p for s in streams for p in s.pending.values()), key=lambda p: p.sent)
            snaps = sorted((p for s in streams for p in s.snapshots.values()), key=lambda p: p.sent)
            ev_left = len(self._unacked_events(streams)) + len(self._evbuf) + self._ev_unloaded
            for s in streams:
                s.pending.clear()
                s.events.clear()
                s.snapshots.clear()
            self._snaps.park([p.snap for p in snaps])
            left = [p.crop for p in unacked] + list(self._buf)
            self._buf.clear()
            self._evbuf.clear()
            if ev_left and self._spool is not None:  # each one's row is there already
                log.info("uplink: %d unacked track events kept in %s", ev_left, self._spool.path)
            elif ev_left:
                self._events_dropped("uplink_shutdown", ev_left)
            if left and self._spool is not None:
                self._to_spool(left, front=True)
                log.info("uplink: %d unsent crops kept in %s", len(left), self._spool.path)
            elif left:
                self._dropped("uplink_shutdown", len(left))
            self._gauges()
        for s in streams:
            self._end(s)
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._spool is not None:
            self._spool.close()

    # -- sending ---------------------------------------------------------------------------

    def _take(self, n: int, timeout: float) -> _Batch:
        """Up to n crops, the track events that may go now (see _take_events) and the next
        snapshots."""
        with self._cond:
            self._refill()
            self._refill_events()
            events = self._take_events()
            snaps = self._snaps.take()
            if not self._buf and not events and not snaps:
                self._cond.wait(timeout)
                self._refill()
                self._refill_events()
                events = self._take_events()
                snaps = self._snaps.take()
            out = [self._buf.popleft() for _ in range(min(n, len(self._buf)))]
            self._ev_in_hand = len(events)  # neither buffered nor in flight until sent
            self._gauges()
            return _Batch(out, events, snaps)

    def _take_events(self) -> list[_Ev]:
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
        taken: list[_Ev] = []
        keep: deque[_Ev] = deque()
        for e in self._evbuf:
            if len(taken) < EVENTS_PER_BATCH and e.event.camera_id not in blocked:
                taken.append(e)
            else:
                keep.append(e)
                blocked.add(e.event.camera_id)
        if taken:
            self._evbuf = keep
        return taken

    def _unacked_events(self, streams: list[_Stream]) -> list[_EventPending]:
        """The streams' events in flight, in the order they were offered."""
        return sorted(
            (p for s in streams for plist in s.events.values() for p in plist),
            key=lambda p: p.ev.order,
        )

    def _refill(self) -> None:
        """Move crops from the spool's head into memory when memory runs low (lock held)."""
        if self._spool is None or len(self._buf) > self.cfg.queue // 2 or not len(self._spool):
            return
        try:
            crops, bad = self._spool.pop(self.cfg.queue - len(self._buf))
        except sqlite3.Error as exc:
            log.error("uplink spool %s unreadable: %s", self._spool.path, exc)
            return
        self._buf.extend(crops)
        if bad:
            self._dropped("uplink_spool_corrupt", bad)

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
            self._evbuf.append(_Ev(ev, row))
            self._ev_loaded = row
        self._ev_unloaded = max(0, self._ev_unloaded - len(rows) - bad)
        if bad:
            self._events_dropped("uplink_spool_corrupt", bad)

    def _requeue(self, crops: list[analytics_pb2.Crop]) -> None:
        """Back to the front, oldest first. Over the memory bound, the newest in memory move
        to the front of the spool (order kept); without a spool the oldest drop."""
        if not crops:
            return
        over = 0
        with self._cond:
            self._buf.extendleft(reversed(crops))
            over = len(self._buf) - self.cfg.queue
            if over > 0 and self._spool is not None:
                tail = [self._buf.pop() for _ in range(over)]
                tail.reverse()
                self._to_spool(tail, front=True)
                over = 0
            for _ in range(max(0, over)):
                self._buf.popleft()
            self._gauges()
        if over > 0:
            self._dropped("crop_buffer_full", over)

    def _requeue_events(self, events: list[_Ev]) -> None:
        """Back to the front, in the order offered: each camera's unacked events are its
        oldest. Memory may pass its bound by what was in flight (one batch per camera)."""
        if not events:
            return
        with self._cond:
            self._evbuf.extendleft(reversed(events))
            self._gauges()
            self._cond.notify()

    def _connect(self) -> str:
        """Make the channel if needed and check the cloud answers; '' or why not."""
        if self._channel is None:
            size = 64 * 1024 * 1024
            options = [
                ("grpc.lb_policy_name", "round_robin"),
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
            ]
            if self.cfg.tls.server_name:
                options.append(("grpc.ssl_target_name_override", self.cfg.tls.server_name))
            if self._credentials is not None:
                self._channel = grpc.secure_channel(self.target, self._credentials, options)
            else:
                self._channel = grpc.insecure_channel(self.target, options)
        check = self._channel.unary_unary(HEALTH_CHECK)
        try:
            # An empty HealthCheckRequest; its status names a TLS or token problem clearly.
            check(b"", timeout=self.cfg.connect_timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in _REACHABLE:
                return ""
            return f"cloud {self.target}: {code.name}: {exc.details()}"
        return ""

    def _open_stream(self) -> _Stream | str:
        from strata.shared.contracts import analytics_pb2_grpc

        if not self._streams:
            why = self._connect()
            if why:
                return why
        assert self._channel is not None
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def gen() -> Iterator[analytics_pb2.CropBatch]:
            while True:
                item = requests.get()
                if item is _CLOSE:
                    return
                yield item

        stub = analytics_pb2_grpc.AnalyticsStub(self._channel)  # type: ignore[no-untyped-call]
        stream = _Stream(stub.Uplink(gen(), metadata=self._metadata), requests, time.monotonic())
        with self._cond:
            self._streams.append(stream)
        threading.Thread(
            target=self._read, args=(stream,), name="edge-uplink-acks", daemon=True
        ).start()
        log.info("uplink stream %d to %s open", len(self._streams), self.target)
        return stream

    def _recycle(self) -> None:
        """Renew streams past stream_max_age_s: round_robin places each new one on the next
        endpoint, so streams spread over endpoints that were not ready (or not there) when
        the old ones opened. A draining stream takes no new batches and ends once acked."""
        now = time.monotonic()
        done: list[_Stream] = []
        with self._cond:
            for s in self._streams:
                if not s.draining and now - s.opened > self.cfg.stream_max_age_s:
                    s.draining = True
                if s.draining and not s.pending and not s.events and not s.snapshots:
                    done.append(s)
            for s in done:
                self._streams.remove(s)
        for s in done:
            self._end(s)

    def _pick(self) -> _Stream | str:
        """The open stream with the fewest crops in flight; opens more up to `streams`."""
        self._recycle()
        with self._cond:
            streams = [s for s in self._streams if not s.draining]
        if len(streams) < self.cfg.streams:
            opened = self._open_stream()
            if isinstance(opened, _Stream) or not streams:
                return opened
        return min(streams, key=lambda s: len(s.pending) + len(s.events) + len(s.snapshots))

    @staticmethod
    def _end(stream: _Stream) -> None:
        stream.requests.put(_CLOSE)
        stream.call.cancel()

    def _stream_failed(self, stream: _Stream, why: str) -> None:
        """A stream broke: forget it, its crops go back to the buffer, the breaker hears."""
        with self._cond:
            if stream not in self._streams:
                return
            self._streams.remove(stream)
            pending = sorted(stream.pending.values(), key=lambda p: p.sent)
            stream.pending.clear()
            events = self._unacked_events([stream])
            stream.events.clear()
            snaps = sorted(stream.snapshots.values(), key=lambda p: p.sent)
            stream.snapshots.clear()
        self._end(stream)
        self._requeue([p.crop for p in pending])
        self._requeue_events([p.ev for p in events])
        self._snaps.requeue([p.snap for p in snaps])
        probe = any(p.probe for p in pending) or any(p.probe for p in events)
        probe = probe or any(p.probe for p in snaps)
        self.breaker.failure(why, probe=probe)

    def _inflight(self) -> tuple[int, int]:
        """(crops, track events and snapshots) in flight on all streams."""
        with self._cond:
            crops = sum(len(s.pending) for s in self._streams)
            events = sum(len(v) for s in self._streams for v in s.events.values())
            return crops, events + sum(len(s.snapshots) for s in self._streams)

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.breaker.seconds_until_probe()
            if wait > 0:
                self._stop.wait(min(wait, 0.2))
                continue
            self._expire()
            pause = self._retry_until - time.monotonic()
            if pause > 0:
                self._stop.wait(min(pause, 0.2))
                continue
            # In half-open state only the probe batch is out; wait for its verdict. Otherwise a
            # window bounds what is in flight (and so how far a resend can reorder crops).
            # Track events count for the half-open rule; the window is the crops' (a
            # camera's events are one batch in flight at most).
            crops_out, events_out = self._inflight()
            if (crops_out or events_out) and (
                self.breaker.state is not BreakerState.CLOSED or crops_out >= self.cfg.max_inflight
            ):
                self._stop.wait(0.005 if self.breaker.state is BreakerState.CLOSED else 0.05)
                continue
            batch = self._take(self.cfg.batch, 0.1)
            if batch.empty:
                continue
            try:
                self._send(batch)
            finally:
                if batch.events:
                    with self._cond:
                        self._ev_in_hand = 0

    def _back(self, b: _Batch) -> None:
        """A batch that did not go out, back to its buffers."""
        self._requeue(b.crops)
        self._requeue_events(b.events)
        self._snaps.requeue(b.snapshots)

    def _send(self, b: _Batch) -> None:
        """One batch out on a stream, or back to the buffers (breaker, no stream)."""
        crops, events = b.crops, b.events
        if not self.breaker.allow():
            self._back(b)
            self._stop.wait(0.05)
            return
        probe = self.breaker.state is not BreakerState.CLOSED
        stream = self._pick()
        if isinstance(stream, str):
            self._back(b)
            log.warning("uplink: %s", stream)
            self.breaker.failure(stream, probe=probe)
            return
        now = time.monotonic()
        with self._cond:
            # The stream may already have failed (a refused call ends at once); then
            # its failure requeued nothing of these, so they go back here.
            live = stream in self._streams
            if live:
                for c in crops:
                    stream.pending[c.crop_id] = _Pending(c, now, probe)
                for e in events:
                    stream.events.setdefault(e.event.idempotency_key, []).append(
                        _EventPending(e, now, probe)
                    )
                for sn in b.snapshots:
                    stream.snapshots[sn.snapshot_id] = _SnapPending(sn, now, probe)
        if not live:
            self._back(b)
            if probe:
                self.breaker.failure("stream ended before the probe went out", probe=True)
            return
        stream.requests.put(
            analytics_pb2.CropBatch(
                version=current_version(),
                crops=crops,
                events=[e.event for e in events],
                snapshots=b.snapshots,
            )
        )
        if b.snapshots:
            self.metrics.uplink_snapshots.labels("sent").inc(len(b.snapshots))
        if crops:
            self.metrics.crops.labels("sent").inc(len(crops))
            self.metrics.uplink_bytes.inc(sum(len(c.image) for c in crops))
        if events:
            self.metrics.uplink_events.labels("sent").inc(len(events))

    def _expire(self) -> None:
        now = time.monotonic()
        with self._cond:
            late = [
                s
                for s in self._streams
                if any(now - p.sent > self.cfg.ack_timeout_s for p in s.pending.values())
                or any(now - p.sent > self.cfg.ack_timeout_s for v in s.events.values() for p in v)
                or any(now - p.sent > self.cfg.ack_timeout_s for p in s.snapshots.values())
            ]
            n = sum(len(s.pending) for s in late)
            n_events = sum(len(v) for s in late for v in s.events.values())
            n_snaps = sum(len(s.snapshots) for s in late)
        if n_snaps:
            self.metrics.uplink_snapshots.labels("timeout").inc(n_snaps)
        if n:
            self.metrics.crops.labels("timeout").inc(n)
        if n_events:
            self.metrics.uplink_events.labels("timeout").inc(n_events)
        if late:
            log.warning(
                "%d crops and %d track events unacked after %.1f s",
                n,
                n_events,
                self.cfg.ack_timeout_s,
            )
        for s in late:
            self._stream_failed(s, "ack timeout")

    # -- acks ------------------------------------------------------------------------------

    def _read(self, stream: _Stream) -> None:
        try:
            for resp in stream.call:
                self._on_response(stream, resp)
            why = "stream closed by the cloud"
        except grpc.RpcError as exc:
            why = f"stream failed: {exc.code().name} {exc.details()}"
        except ValueError as exc:
            why = str(exc)
        if not self._stop.is_set():
            with self._cond:
                mine = stream in self._streams
            if mine:
                log.warning("uplink %s: %s", self.target, why)
                self._stream_failed(stream, why)

    def _on_response(self, stream: _Stream, resp: analytics_pb2.UplinkResponse) -> None:
        check_version(resp.version)
        now = time.monotonic()
        retry: list[analytics_pb2.Crop] = []
        for ack in resp.acks:
            with self._cond:
                p = stream.pending.pop(ack.crop_id, None)
            if p is None:
                continue
            latency = now - p.sent
            self.metrics.uplink_latency.observe(latency)
            if ack.status == analytics_pb2.CROP_STATUS_STORED:
                self.metrics.crops.labels("stored").inc()
                self.breaker.success(latency, probe=p.probe)
            elif ack.status == analytics_pb2.CROP_STATUS_INVALID:
                # The cloud answered: the link is fine, the crop is not. Counted and logged.
                self.metrics.crops.labels("invalid").inc()
                self.metrics.drops.labels("crop_invalid").inc()
                log.warning("cloud rejected crop %s: %s", ack.crop_id, ack.reason)
                self.breaker.success(latency, probe=p.probe)
            else:
                self.metrics.crops.labels("retry").inc()
                retry.append(p.crop)
                self._retry_until = max(self._retry_until, now + ack.retry_after_ms / 1e3)
                self.breaker.failure(f"cloud busy: {ack.reason or 'retry'}", probe=p.probe)
        if retry:
            self._requeue(retry)
        self._on_event_acks(stream, resp, now)
        self._on_snapshot_acks(stream, resp, now)

    def _on_snapshot_acks(
        self, stream: _Stream, resp: analytics_pb2.UplinkResponse, now: float
    ) -> None:
        """Settle the stream's snapshots the response acks: final, or back to the front with
        the cloud's retry_after_ms. A cloud before 2.2 stores none (SnapshotQueue.old_cloud)."""
        if resp.version.minor < 2:
            with self._cond:
                flying = [p.snap for p in stream.snapshots.values()]
                stream.snapshots.clear()
            if flying or resp.snapshot_acks:
                self._snaps.old_cloud(flying, resp.version.minor)
            return
        retry: list[_SnapPending] = []
        for ack in resp.snapshot_acks:
            with self._cond:
                p = stream.snapshots.pop(ack.snapshot_id, None)
            if p is None:
                continue
            if self._snaps.acked(ack):
                self.breaker.success(now - p.sent, probe=p.probe)
            else:
                retry.append(p)
                self._retry_until = max(self._retry_until, now + ack.retry_after_ms / 1e3)
        if retry:
            self.breaker.failure(
                "cloud busy: snapshots got RETRY", probe=any(p.probe for p in retry)
            )
            self._snaps.requeue([p.snap for p in sorted(retry, key=lambda q: q.sent)])

    def _on_event_acks(
        self, stream: _Stream, resp: analytics_pb2.UplinkResponse, now: float
    ) -> None:
        """Settle the stream's track events the response acks: final, or back to the front
        of their camera's queue with the camera held for the cloud's retry_after_ms."""
        if resp.version.minor < 1:
            self._old_cloud(stream, resp)
            return
        retry: list[_EventPending] = []
        final: list[_EventPending] = []
        for ack in resp.event_acks:
            with self._cond:
                plist = stream.events.get(ack.idempotency_key)
                p = plist.pop(0) if plist else None
                if plist is not None and not plist:
                    del stream.events[ack.idempotency_key]
            if p is None:
                continue
            status = _FINAL.get(ack.status)
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

    def _forget(self, done: list[_Ev]) -> None:
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

    def _old_cloud(self, stream: _Stream, resp: analytics_pb2.UplinkResponse) -> None:
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
