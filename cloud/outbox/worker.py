"""`SinkWorker`: one thread per sink that moves its positions forward by delivering.

Each pass, per source: advance the horizon, find new cameras, claim the free cameras'
leases, and deliver each claimed camera's events in id order. A failed delivery stops that
camera (order) and the sink backs off, doubling up to cloud.sinks.max_retry_s; the event is
sent again from the store, never from memory. Every few seconds the backlog is measured
(metrics) and cut to cloud.sinks.max_backlog per camera, counting and logging what goes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import SinksConfig

from .connect import open_database
from .db import Database, LedgerError
from .gaps import Horizon
from .ledger import Claim, Ledger
from .metrics import SinkMetrics
from .sink import DeliveryError, Sink
from .sources import SOURCES, TableSource

log = logging.getLogger(__name__)

BACKLOG_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class WorkerParts:
    """What every worker shares: where the database is, the config, metrics, who we are."""

    store: CloudStoreConfig
    cfg: SinksConfig
    metrics: SinkMetrics
    # This replica's lease owner id (host, pid, random).
    owner: str
    sources: tuple[TableSource, ...] = SOURCES


@dataclass(slots=True)
class _Lag:
    """A sink's backlog summed over its sources and cameras."""

    count: int = 0
    oldest_ns: int = 0

    def add(self, count: int, oldest_ns: int) -> None:
        self.count += count
        if oldest_ns and (not self.oldest_ns or oldest_ns < self.oldest_ns):
            self.oldest_ns = oldest_ns

    def publish(self, m: SinkMetrics, sink: str) -> None:
        m.backlog.labels(sink=sink).set(self.count)
        age = time.time() - self.oldest_ns / 1e9 if self.oldest_ns else 0.0
        m.oldest_age.labels(sink=sink).set(max(0.0, age))


class SinkWorker:
    """Delivers one sink's backlog in its own thread; stop() ends it and its leases."""

    def __init__(self, sink: Sink, parts: WorkerParts) -> None:
        self.sink = sink
        self.parts = parts
        self.cfg = parts.cfg
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sink-{sink.name}", daemon=True)
        self._failures = 0
        self._next_backlog = 0.0
        m = parts.metrics
        self._delivered = m.delivered.labels(sink=sink.name)
        self._latency = m.latency.labels(sink=sink.name)

    def start(self) -> None:
        """Connect the sink and start delivering."""
        self.sink.start()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the delivery in hand, give the leases back, disconnect."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.sink.close()

    # the loop

    def _run(self) -> None:
        db_failures = 0
        while not self._stop.is_set():
            try:
                db = open_database(self.parts.store)
            except LedgerError as exc:
                db_failures += 1
                self._db_trouble(exc, db_failures)
                continue
            try:
                self._serve(db)
                return
            except LedgerError as exc:
                db_failures += 1
                self._db_trouble(exc, db_failures)
            except Exception as exc:  # a bug must not end delivery for good: log, go on
                log.exception("sink %s: unexpected error; starting over", self.sink.name)
                db_failures += 1
                self._db_trouble(LedgerError(f"unexpected: {exc}"), db_failures)
            finally:
                db.close()

    def _db_trouble(self, exc: LedgerError, n: int) -> None:
        self.parts.metrics.failed.labels(sink=self.sink.name, reason="store").inc()
        (log.error if n == 1 else log.debug)("sink %s: %s (retrying)", self.sink.name, exc)
        self._stop.wait(min(self.cfg.max_retry_s, self.cfg.retry_s * 2 ** min(n, 10)))

    def _serve(self, db: Database) -> None:
        ledgers: list[tuple[Ledger, Horizon]] = []
        for source in self.parts.sources:
            ledger = Ledger(db, self.sink.name, source, self.parts.owner, self.cfg)
            floor = ledger.register()
            ledgers.append((ledger, Horizon(db, source, floor, self.cfg.gap_wait_s)))
        try:
            while not self._stop.is_set():
                moved = 0
                measure = time.monotonic() >= self._next_backlog
                lag = _Lag()
                for ledger, horizon in ledgers:
                    upto = horizon.advance()
                    ledger.discover(upto)
                    claims = ledger.claim()
                    if measure:
                        claims = self._measure(ledger, claims, upto, lag)
                    for claim in claims:
                        moved += self._drain(ledger, claim, upto)
                        if self._stop.is_set():
                            break
                if measure:
                    self._next_backlog = time.monotonic() + BACKLOG_EVERY_S
                    lag.publish(self.parts.metrics, self.sink.name)
                if not moved:
                    self._stop.wait(self.cfg.poll_s)
        finally:
            for ledger, _ in ledgers:
                try:
                    ledger.release()
                except LedgerError:
                    pass  # the lease expires by itself

    def _drain(self, ledger: Ledger, claim: Claim, upto: int) -> int:
        """Deliver one camera's events after its position; the number handled."""
        done = 0
        pos = claim.position
        lease_end = time.monotonic() + self.cfg.lease_s * 0.5
        while not self._stop.is_set():
            events = ledger.read(claim.camera_id, pos, upto, self.cfg.batch)
            if not events:
                return done
            handled = 0
            delivered = 0
            try:
                for ev in events:
                    if self._stop.is_set() or time.monotonic() > lease_end:
                        break
                    why = self.sink.skip_reason(ev)
                    if why is not None:
                        self.parts.metrics.skipped.labels(sink=self.sink.name, reason=why).inc()
                    else:
                        self.sink.deliver(ev)
                        delivered += 1
                        self._delivered.inc()
                        t_ns = ev.capture_ns or ev.stored_ns
                        self._latency.observe(max(0.0, time.time() - t_ns / 1e9))
                    pos = ev.stored_id
                    handled += 1
            except DeliveryError as exc:
                self._failed(exc)
                self._flush(ledger, claim.camera_id, pos, delivered, handled)
                return done + handled
            if not self._flush(ledger, claim.camera_id, pos, delivered, handled):
                return done + handled
            done += handled
            self._failures = 0
            if len(events) < self.cfg.batch or time.monotonic() > lease_end:
                return done  # renew the lease (next pass) before going on
        return done

    def _flush(self, ledger: Ledger, camera: str, pos: int, delivered: int, n: int) -> bool:
        if not n:
            return True
        if ledger.advance(camera, pos, delivered):
            return True
        log.warning(
            "sink %s: lost the lease on camera %s; another replica goes on", self.sink.name, camera
        )
        return False

    def _failed(self, exc: DeliveryError) -> None:
        self._failures += 1
        self.parts.metrics.failed.labels(sink=self.sink.name, reason=exc.reason).inc()
        wait = min(self.cfg.max_retry_s, self.cfg.retry_s * 2 ** min(self._failures - 1, 16))
        (log.warning if self._failures == 1 else log.debug)(
            "sink %s: delivery failed (%s); kept, retrying in %.1f s", self.sink.name, exc, wait
        )
        self._stop.wait(wait)

    def _measure(self, ledger: Ledger, claims: list[Claim], upto: int, lag: _Lag) -> list[Claim]:
        """Publish the backlog and cut it; the claims, moved past what a cut dropped (a
        dropped event must never be delivered too)."""
        held = {c.camera_id: c for c in claims}
        m, name = self.parts.metrics, self.sink.name
        for b in ledger.backlog(upto):
            count, oldest_ns = b.count, b.oldest_ns
            if count > self.cfg.max_backlog and b.camera_id in held:
                cut = ledger.cut(b.camera_id, self.cfg.max_backlog, upto)
                if cut is not None and cut.dropped:
                    held[b.camera_id] = Claim(b.camera_id, cut.position)
                    m.dropped.labels(sink=name).inc(cut.dropped)
                    log.error(
                        "sink %s: camera %s: backlog over cloud.sinks.max_backlog (%d): dropped "
                        "the %d oldest undelivered events, the oldest %.0f s old",
                        name,
                        b.camera_id,
                        self.cfg.max_backlog,
                        cut.dropped,
                        time.time() - cut.oldest_ns / 1e9,
                    )
                    count -= cut.dropped
                    oldest_ns = 0  # re-measured next time
            lag.add(count, oldest_ns)
        return list(held.values())
