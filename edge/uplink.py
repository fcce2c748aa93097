"""Crops to the cloud over the bidirectional Uplink stream, behind a circuit breaker.

Crops wait in a bounded buffer (the oldest are dropped and counted when it is full). One
thread sends batches while the breaker allows, another reads acks. A broken stream, an ack
timeout or an unreachable cloud count as failures; the crops in flight go back to the
buffer. While the breaker is open nothing is sent; after `open_s` one batch probes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2, check_version, current_version

from .breaker import BreakerState, CircuitBreaker
from .metrics import EdgeMetrics

log = logging.getLogger(__name__)

_CLOSE = object()


@dataclass(slots=True)
class _Pending:
    crop: analytics_pb2.Crop
    sent: float


class Uplink:
    """Owns the gRPC channel, the crop buffer and the breaker."""

    def __init__(self, target: str, cfg: UplinkConfig, metrics: EdgeMetrics) -> None:
        self.target = target
        self.cfg = cfg
        self.metrics = metrics
        self.breaker = CircuitBreaker(
            cfg.failure_threshold,
            cfg.p99_limit_ms / 1e3,
            cfg.latency_window,
            cfg.open_s,
            on_change=self._on_breaker,
        )
        metrics.breaker_state.set(BreakerState.CLOSED)
        self._buf: deque[analytics_pb2.Crop] = deque()
        self._cond = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._stop = threading.Event()
        self._requests: queue.SimpleQueue[Any] | None = None
        self._call: Any = None
        self._channel: Any = None
        self._broken = threading.Event()
        # The cloud asked for a pause (CROP_STATUS_RETRY with retry_after_ms) until then.
        self._retry_until = 0.0
        self._thread = threading.Thread(target=self._run, name="edge-uplink", daemon=True)

    def _on_breaker(self, state: BreakerState) -> None:
        self.metrics.breaker_state.set(int(state))
        if state is BreakerState.OPEN:
            self.metrics.breaker_trips.inc()

    def start(self) -> None:
        self._thread.start()

    def offer(self, crops: list[analytics_pb2.Crop]) -> None:
        """Buffer crops for the cloud; never blocks. Overflow drops the oldest, counted."""
        if not crops:
            return
        dropped = 0
        with self._cond:
            for c in crops:
                if len(self._buf) >= self.cfg.queue:
                    self._buf.popleft()
                    dropped += 1
                self._buf.append(c)
            self.metrics.crop_queue.set(len(self._buf))
            self._cond.notify()
        if dropped:
            self.metrics.drops.labels("crop_buffer_full").inc(dropped)
            log.warning(
                "dropped %d crops: uplink buffer full (%d), breaker %s",
                dropped,
                self.cfg.queue,
                self.breaker.state.name,
            )

    @property
    def buffered(self) -> int:
        with self._cond:
            return len(self._buf)

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._close_stream()

    # -- sending ---------------------------------------------------------------------------

    def _take(self, n: int, timeout: float) -> list[analytics_pb2.Crop]:
        with self._cond:
            if not self._buf:
                self._cond.wait(timeout)
            out = [self._buf.popleft() for _ in range(min(n, len(self._buf)))]
            self.metrics.crop_queue.set(len(self._buf))
            return out

    def _requeue(self, crops: list[analytics_pb2.Crop]) -> None:
        # Back to the front, oldest first; the buffer bound still holds (drop the oldest).
        with self._cond:
            self._buf.extendleft(reversed(crops))
            over = len(self._buf) - self.cfg.queue
            for _ in range(max(0, over)):
                self._buf.popleft()
            self.metrics.crop_queue.set(len(self._buf))
        if over > 0:
            self.metrics.drops.labels("crop_buffer_full").inc(over)
            log.warning("dropped %d crops on requeue: uplink buffer full", over)

    def _open_stream(self) -> bool:
        import grpc
        from strata.shared.contracts import analytics_pb2_grpc

        self._close_stream()
        channel = grpc.insecure_channel(self.target)
        try:
            grpc.channel_ready_future(channel).result(timeout=self.cfg.connect_timeout_s)
        except grpc.FutureTimeoutError:
            channel.close()
            self.breaker.failure(f"cloud {self.target} unreachable")
            return False
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def gen() -> Iterator[analytics_pb2.CropBatch]:
            while True:
                item = requests.get()
                if item is _CLOSE:
                    return
                yield item

        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        self._channel, self._requests = channel, requests
        self._call = stub.Uplink(gen())
        self._broken.clear()
        threading.Thread(
            target=self._read, args=(self._call,), name="edge-uplink-acks", daemon=True
        ).start()
        log.info("uplink stream to %s open", self.target)
        return True

    def _close_stream(self) -> None:
        if self._requests is not None:
            self._requests.put(_CLOSE)
            self._requests = None
        if self._call is not None:
            self._call.cancel()
            self._call = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _fail_pending(self, why: str) -> None:
        with self._cond:
            crops = [p.crop for p in self._pending.values()]
            self._pending.clear()
        if crops:
            self._requeue(crops)
        self.breaker.failure(why)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._broken.is_set():
                self._close_stream()
                self._broken.clear()
            wait = self.breaker.seconds_until_probe()
            if wait > 0:
                self._stop.wait(min(wait, 0.2))
                continue
            self._expire()
            pause = self._retry_until - time.monotonic()
            if pause > 0:
                self._stop.wait(min(pause, 0.2))
                continue
            with self._cond:
                inflight = len(self._pending)
            # In half-open state only the probe batch is out; wait for its verdict.
            if self.breaker.state is not BreakerState.CLOSED and inflight:
                self._stop.wait(0.05)
                continue
            crops = self._take(self.cfg.batch, 0.1)
            if not crops:
                continue
            if not self.breaker.allow():
                self._requeue(crops)
                self._stop.wait(0.05)
                continue
            if self._call is None and not self._open_stream():
                self._requeue(crops)
                continue
            now = time.monotonic()
            with self._cond:
                for c in crops:
                    self._pending[c.crop_id] = _Pending(c, now)
            assert self._requests is not None
            self._requests.put(analytics_pb2.CropBatch(version=current_version(), crops=crops))
            self.metrics.crops.labels("sent").inc(len(crops))
            self.metrics.uplink_bytes.inc(sum(len(c.image) for c in crops))

    def _expire(self) -> None:
        now = time.monotonic()
        with self._cond:
            late = [k for k, p in self._pending.items() if now - p.sent > self.cfg.ack_timeout_s]
            crops = [self._pending.pop(k).crop for k in late]
        if crops:
            self.metrics.crops.labels("timeout").inc(len(crops))
            log.warning("%d crops unacked after %.1f s", len(crops), self.cfg.ack_timeout_s)
            self._requeue(crops)
            self.breaker.failure("ack timeout")
            self._broken.set()

    # -- acks ------------------------------------------------------------------------------

    def _read(self, call: Any) -> None:
        import grpc

        try:
            for resp in call:
                self._on_response(resp)
            why = "stream closed by the cloud"
        except grpc.RpcError as exc:
            why = f"stream failed: {exc.code().name} {exc.details()}"
        except ValueError as exc:
            why = str(exc)
        if call is self._call and not self._stop.is_set():
            log.warning("uplink: %s", why)
            self._fail_pending(why)
            self._broken.set()

    def _on_response(self, resp: analytics_pb2.UplinkResponse) -> None:
        check_version(resp.version)
        now = time.monotonic()
        retry: list[analytics_pb2.Crop] = []
        for ack in resp.acks:
            with self._cond:
                p = self._pending.pop(ack.crop_id, None)
            if p is None:
                continue
            latency = now - p.sent
            self.metrics.uplink_latency.observe(latency)
            if ack.status == analytics_pb2.CROP_STATUS_STORED:
                self.metrics.crops.labels("stored").inc()
                self.breaker.success(latency)
            elif ack.status == analytics_pb2.CROP_STATUS_INVALID:
                # The cloud answered: the link is fine, the crop is not. Counted and logged.
                self.metrics.crops.labels("invalid").inc()
                self.metrics.drops.labels("crop_invalid").inc()
                log.warning("cloud rejected crop %s: %s", ack.crop_id, ack.reason)
                self.breaker.success(latency)
            else:
                self.metrics.crops.labels("retry").inc()
                retry.append(p.crop)
                self._retry_until = max(self._retry_until, now + ack.retry_after_ms / 1e3)
                self.breaker.failure(f"cloud busy: {ack.reason or 'retry'}")
        if retry:
            self._requeue(retry)
