"""The outbox's delivery positions on a real SQLite store and a real PostgreSQL: order per
camera, nothing lost across failures and restarts, the backlog bound, one replica per camera
at a time, a dead replica's lease taken over, and ids committed out of order."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from outbox_helpers import crop_event, fill, sample, started_store, wait_for
from strata.cloud.metrics import CloudMetrics
from strata.cloud.outbox.connect import open_database
from strata.cloud.outbox.events import OutboxEvent
from strata.cloud.outbox.ledger import Ledger
from strata.cloud.outbox.sink import DeliveryError
from strata.cloud.outbox.sources import CROPS
from strata.cloud.outbox.worker import SinkWorker, WorkerParts
from strata.cloud.store.event_rows import INSERT_COLUMNS, insert_row, placeholders
from strata.cloud.store.event_store import EventStore
from strata.cloud.store.registry import open_store
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import SinksConfig
from strata.shared.contracts import analytics_pb2

Stored = tuple[EventStore, CloudStoreConfig]
FAST = {"start": "all", "poll_s": 0.05, "lease_s": 2.0, "retry_s": 0.05, "max_retry_s": 0.2}


class RecordingSink:
    """Keeps what it is given; `fail(n)` makes the n-th call fail."""

    def __init__(self, name: str = "rec", fail: Callable[[int], bool] = lambda _n: False):
        self.name = name
        self.fail = fail
        self.got: list[OutboxEvent] = []
        self.calls = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def skip_reason(self, ev: OutboxEvent) -> str | None:
        return None

    def deliver(self, ev: OutboxEvent) -> None:
        with self._lock:
            n = self.calls
            self.calls += 1
        if self.fail(n):
            raise DeliveryError("down", "the test's sink is down")
        with self._lock:
            self.got.append(ev)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    yield from started_store(tmp_path)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    cfg = CloudStoreConfig(url=pg_url, write_delay_ms=1.0)
    store = open_store(cfg, CloudMetrics())
    store.start()
    yield store, cfg
    store.close()


def run_worker(
    sink: RecordingSink, store: CloudStoreConfig, metrics: CloudMetrics, owner: str, **cfg: object
) -> SinkWorker:
    parts = WorkerParts(store, SinksConfig.model_validate({**FAST, **cfg}), metrics.sinks, owner)
    w = SinkWorker(sink, parts)
    w.start()
    return w


def interleaved(cameras: list[str], n: int, start: int = 0) -> list[analytics_pb2.Event]:
    return [crop_event(c, i, track=i % 3 + 1) for i in range(start, start + n) for c in cameras]


def by_camera(events: list[OutboxEvent]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for ev in events:
        out[ev.camera_id].append(ev.stored_id)
    return out


def test_every_event_arrives_in_order_per_camera(sqlite_store: Stored) -> None:
    store, cfg = sqlite_store
    ids = fill(store, interleaved(["a", "b", "c"], 20))
    sink, metrics = RecordingSink(), CloudMetrics()
    w = run_worker(sink, cfg, metrics, "r1")
    try:
        wait_for(lambda: len(sink.got) == 60, 20, "60 deliveries")
        wait_for(
            lambda: (
                sample(metrics.registry, "strata_cloud_sink_backlog", sink="rec") == 0
                and sample(metrics.registry, "strata_cloud_sink_delivered_total", sink="rec") == 60
            ),
            10,
            "backlog 0",
        )
    finally:
        w.stop()
    assert sorted(ev.stored_id for ev in sink.got) == sorted(ids)
    for cam, got in by_camera(sink.got).items():
        assert got == sorted(got), cam
    assert len({ev.key for ev in sink.got}) == 60
    first = {ev.key: ev.type for ev in sink.got}
    # A track's first crop is "new", its later ones "update".
    assert sum(t == "new" for t in first.values()) == 9  # 3 cameras x 3 tracks


def test_a_failing_sink_loses_nothing_and_keeps_order(sqlite_store: Stored) -> None:
    store, cfg = sqlite_store
    fill(store, interleaved(["a", "b"], 15))
    sink, metrics = RecordingSink(fail=lambda n: n < 6 or n % 4 == 0), CloudMetrics()
    w = run_worker(sink, cfg, metrics, "r1")
    try:
        wait_for(lambda: len(sink.got) == 30, 30, "30 deliveries")
    finally:
        w.stop()
    assert len({ev.key for ev in sink.got}) == 30
    for cam, got in by_camera(sink.got).items():
        assert got == sorted(got), cam
    assert (
        sample(metrics.registry, "strata_cloud_sink_failed_total", sink="rec", reason="down") >= 6
    )


def test_positions_survive_a_restart(sqlite_store: Stored) -> None:
    store, cfg = sqlite_store
    fill(store, interleaved(["a", "b"], 10))
    first = RecordingSink()
    w = run_worker(first, cfg, CloudMetrics(), "r1")
    wait_for(lambda: len(first.got) == 20, 20, "20 deliveries")
    w.stop()
    fill(store, interleaved(["a", "b", "c"], 5, start=100))
    second = RecordingSink()
    w = run_worker(second, cfg, CloudMetrics(), "r2")
    try:
        wait_for(lambda: len(second.got) == 15, 20, "the 15 new events")
        time.sleep(0.3)
    finally:
        w.stop()
    assert len(second.got) == 15
    assert not {e.key for e in first.got} & {e.key for e in second.got}


def test_a_new_sink_starts_at_new_events_by_default(sqlite_store: Stored) -> None:
    store, cfg = sqlite_store
    fill(store, interleaved(["a"], 5))
    sink = RecordingSink()
    w = run_worker(sink, cfg, CloudMetrics(), "r1", start="now")
    try:
        time.sleep(0.5)
        ids = fill(store, interleaved(["a"], 3, start=50))
        wait_for(lambda: len(sink.got) == 3, 20, "the 3 new events")
    finally:
        w.stop()
    assert [e.stored_id for e in sink.got] == ids


def test_the_backlog_is_bounded_counted_and_logged(
    sqlite_store: Stored, caplog: pytest.LogCaptureFixture
) -> None:
    store, cfg = sqlite_store
    up = threading.Event()
    sink, metrics = RecordingSink(fail=lambda _n: not up.is_set()), CloudMetrics()
    ids = fill(store, interleaved(["a"], 20))
    with caplog.at_level(logging.ERROR, logger="strata.cloud.outbox.worker"):
        w = run_worker(sink, cfg, metrics, "r1", max_backlog=5)
        try:
            wait_for(
                lambda: (
                    sample(metrics.registry, "strata_cloud_sink_dropped_total", sink="rec") == 15
                ),
                20,
                "15 dropped",
            )
            up.set()
            wait_for(lambda: len(sink.got) == 5, 20, "the 5 kept events")
        finally:
            w.stop()
    assert [e.stored_id for e in sink.got] == ids[-5:]
    line = next(r.getMessage() for r in caplog.records if "max_backlog" in r.getMessage())
    assert "dropped the 15 oldest" in line and "s old" in line


def test_a_cut_backlog_is_never_delivered_as_well(sqlite_store: Stored) -> None:
    # The first pass claims a camera, then cuts its backlog: the delivery that follows
    # starts after the cut, not at the position claimed before it.
    store, cfg = sqlite_store
    sink, metrics = RecordingSink(), CloudMetrics()
    ids = fill(store, interleaved(["a"], 20))
    w = run_worker(sink, cfg, metrics, "r1", max_backlog=5)
    try:
        wait_for(lambda: len(sink.got) >= 5, 20, "the 5 kept events")
        time.sleep(0.3)
    finally:
        w.stop()
    assert [e.stored_id for e in sink.got] == ids[-5:]
    assert sample(metrics.registry, "strata_cloud_sink_dropped_total", sink="rec") == 15


# --- several replicas on PostgreSQL -------------------------------------------------------


def test_replicas_share_cameras_and_deliver_each_event_once(pg_store: Stored) -> None:
    store, cfg = pg_store
    cams = ["a", "b", "c", "d"]
    fill(store, interleaved(cams, 10))
    one, two = RecordingSink(), RecordingSink()
    workers = [
        run_worker(one, cfg, CloudMetrics(), "replica-1"),
        run_worker(two, cfg, CloudMetrics(), "replica-2"),
    ]
    try:
        fill(store, interleaved(cams, 10, start=10))
        wait_for(lambda: len(one.got) + len(two.got) == 80, 30, "80 deliveries")
        time.sleep(0.5)
    finally:
        for w in workers:
            w.stop()
    both = one.got + two.got
    assert len(both) == 80
    assert len({e.key for e in both}) == 80, "an event was delivered twice"
    # A camera is one replica's at a time: its events stay in order at each.
    for sink in (one, two):
        for cam, got in by_camera(sink.got).items():
            assert got == sorted(got), cam


def test_a_dead_replicas_cameras_go_to_another_after_its_lease(pg_store: Stored) -> None:
    store, cfg = pg_store
    fill(store, interleaved(["a", "b"], 5))
    # A replica that claimed every camera and died (kill -9: no release).
    db = open_database(cfg)
    dead = Ledger(db, "rec", CROPS, "dead-replica", SinksConfig.model_validate(FAST))
    dead.register()
    dead.discover(10**9)
    assert {c.camera_id for c in dead.claim()} == {"a", "b"}
    db.close()
    t0 = time.monotonic()
    sink = RecordingSink()
    w = run_worker(sink, cfg, CloudMetrics(), "replica-2")
    try:
        wait_for(lambda: len(sink.got) == 10, 20, "the dead replica's events")
    finally:
        w.stop()
    assert time.monotonic() - t0 >= 1.5, "delivered before the dead replica's lease ran out"


def test_an_id_committed_late_is_not_skipped(pg_store: Stored, pg_url: str) -> None:
    store, cfg = pg_store
    fill(store, [crop_event("a", 0)])
    sink = RecordingSink()
    w = run_worker(sink, cfg, CloudMetrics(), "r1")
    try:
        wait_for(lambda: len(sink.got) == 1, 20, "the first event")
        # Another replica's writer takes an id and has not committed yet ...
        slow = psycopg.connect(pg_url)
        slow.execute(
            f"INSERT INTO events ({INSERT_COLUMNS}) VALUES ({placeholders('%s')})",
            insert_row(crop_event("a", 1)),
        )
        # ... while this one commits a later id of the same camera.
        later = fill(store, [crop_event("a", 2)])
        time.sleep(1.0)
        assert len(sink.got) == 1, "delivered past an id still in flight"
        slow.commit()
        slow.close()
        wait_for(lambda: len(sink.got) == 3, 20, "both events")
    finally:
        w.stop()
    got = [e.stored_id for e in sink.got]
    assert got == sorted(got) and got[-1] == later[0]
