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

This module is the core: the channel, the streams, the sender, the breaker and the acks'
dispatch. Each payload kind is a half of `Uplink` over the state they share
(edge/uplink/inflight.py): crops.py, events.py and snapshot_acks.py; adopt.py takes over a
failed peer's spool.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.adopt import SpoolAdoption
from strata.edge.uplink.breaker import BreakerState, CircuitBreaker
from strata.edge.uplink.crops import CropPayload
from strata.edge.uplink.events import EventPayload
from strata.edge.uplink.inflight import (
    CLOSE,
    Batch,
    CropPending,
    EventPending,
    QueuedEvent,
    SnapPending,
    UplinkStream,
)
from strata.edge.uplink.snapshot_acks import SnapshotPayload
from strata.edge.uplink.snapshots import SnapshotQueue
from strata.edge.uplink.spool import CropSpool
from strata.shared.config.edge import UplinkConfig, cloud_target
from strata.shared.contracts import analytics_pb2, check_version, current_version

log = logging.getLogger(__name__)

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# Statuses of the connect check that still prove the cloud is there and talks to us.
_REACHABLE = (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED)


class UplinkSetupError(ValueError):
    """A TLS or token file of the uplink cannot be read."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UplinkSetupError(f"cannot read the uplink's {what} {path}: {exc.strerror}") from exc


class Uplink(CropPayload, EventPayload, SnapshotPayload, SpoolAdoption):
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
        self._evbuf: deque[QueuedEvent] = deque()
        self._ev_loaded = -(2**62)
        self._ev_unloaded = self._spool.events if self._spool is not None else 0
        self._ev_order = 0  # without a spool
        self._ev_in_hand = 0  # taken by the sender, not yet in flight
        self._ev_hold: dict[str, float] = {}  # camera -> monotonic time its RETRY ends
        self._events_paused_until = 0.0  # an old cloud that acks no event
        self._cond = threading.Condition()
        self._streams: list[UplinkStream] = []
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

    def _gauges(self) -> None:
        self.metrics.crop_queue.set(len(self._buf))
        self.metrics.uplink_event_queue.set(len(self._evbuf))
        if self._spool is not None:
            self.metrics.spool_crops.set(len(self._spool))
            self.metrics.spool_events.set(self._spool.events)
            self.metrics.spool_bytes.set(self._spool.bytes)

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

    def _take(self, n: int, timeout: float) -> Batch:
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
            return Batch(out, events, snaps)

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

    def _open_stream(self) -> UplinkStream | str:
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
                if item is CLOSE:
                    return
                yield item

        stub = analytics_pb2_grpc.AnalyticsStub(self._channel)  # type: ignore[no-untyped-call]
        stream = UplinkStream(
            stub.Uplink(gen(), metadata=self._metadata), requests, time.monotonic()
        )
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
        done: list[UplinkStream] = []
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

    def _pick(self) -> UplinkStream | str:
        """The open stream with the fewest crops in flight; opens more up to `streams`."""
        self._recycle()
        with self._cond:
            streams = [s for s in self._streams if not s.draining]
        if len(streams) < self.cfg.streams:
            opened = self._open_stream()
            if isinstance(opened, UplinkStream) or not streams:
                return opened
        return min(streams, key=lambda s: len(s.pending) + len(s.events) + len(s.snapshots))

    @staticmethod
    def _end(stream: UplinkStream) -> None:
        stream.requests.put(CLOSE)
        stream.call.cancel()

    def _stream_failed(self, stream: UplinkStream, why: str) -> None:
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

    def _back(self, b: Batch) -> None:
        """A batch that did not go out, back to its buffers."""
        self._requeue(b.crops)
        self._requeue_events(b.events)
        self._snaps.requeue(b.snapshots)

    def _send(self, b: Batch) -> None:
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
                    stream.pending[c.crop_id] = CropPending(c, now, probe)
                for e in events:
                    stream.events.setdefault(e.event.idempotency_key, []).append(
                        EventPending(e, now, probe)
                    )
                for sn in b.snapshots:
                    stream.snapshots[sn.snapshot_id] = SnapPending(sn, now, probe)
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

    def _read(self, stream: UplinkStream) -> None:
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

    def _on_response(self, stream: UplinkStream, resp: analytics_pb2.UplinkResponse) -> None:
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
