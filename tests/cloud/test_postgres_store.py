"""The PostgreSQL event store on a real server: the SQLite store's contract, shared by several
store instances (replicas) on one database, and clear refusals of a bad database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from cloud_helpers import LoopThread
from strata.cloud.api.watch import WatchHub, WatchUnavailableError
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.postgres import MIGRATIONS as PG_MIGRATIONS
from strata.cloud.store.postgres import PostgresStore, redact
from strata.cloud.store.postgres_feed import parse_payload, payloads
from strata.cloud.store.registry import (
    SCHEMA_VERSION,
    EventQuery,
    EventStore,
    PageKey,
    StoreError,
    open_store,
)
from strata.cloud.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, common_pb2
from strata.shared.metrics import sample
from strata.tools.postgres_temp import TempPostgres


def event(i: int, edge: str = "e", camera: str = "cam") -> analytics_pb2.Event:
    return analytics_pb2.Event(
        edge_id=edge,
        crop_id=f"c{i}",
        camera_id=camera,
        sequence=2**64 - 1 - i,
        capture_ns=1000 + i,
        # The classifier's evidence; label filters match the detector's label (schema 7).
        label="minivan" if i % 2 else "suit",
        score=0.5,
        edge_detection=common_pb2.Detection(
            score=0.25, class_id=i, label="car" if i % 2 else "person"
        ),
        # The classifier's version; every fifth unknown (stored before it was recorded).
        model_version=None if i % 5 == 0 else i % 3,
    )


def track_event(i: int, track: int) -> analytics_pb2.Event:
    return analytics_pb2.Event(
        edge_id="e",
        crop_id=f"t{i}",
        camera_id="trk",
        capture_ns=5000 + i,
        label="p",
        track_id=track,
    )


def pg_config(url: str, **kw: Any) -> CloudStoreConfig:
    return CloudStoreConfig(**{"url": url, "write_delay_ms": 1.0, "connect_timeout_s": 5.0, **kw})


def all_pages(store: EventStore, q: EventQuery, size: int) -> list[analytics_pb2.Event]:
    out: list[analytics_pb2.Event] = []
    key: PageKey | None = None
    while True:
        page, key = store.query(q, key, size)
        out += page
        if key is None:
            return out


def exercise(store: EventStore) -> list[tuple[str, bool, int]]:
    """The same writes and reads on any back end; returns what a caller can observe."""
    store.start()
    futs = [store.submit(event(i)) for i in range(25)] + [store.submit(event(3))]
    results = [f.result(20) for f in futs]
    assert [r.duplicate for r in results] == [False] * 25 + [True]
    assert results[-1].event.event_id == results[3].event.event_id
    assert results[0].event.sequence == 2**64 - 1  # uint64 survives a signed BIGINT
    assert store.find("e", "c7") == results[7].event
    assert store.find("e", "nope") is None
    paged = all_pages(store, EventQuery(camera_id="cam"), 10)
    assert [e.crop_id for e in paged] == [f"c{i}" for i in range(25)]
    assert paged[4].edge_detection.class_id == 4
    versions = [e.model_version if e.HasField("model_version") else None for e in paged]
    assert versions == [None if i % 5 == 0 else i % 3 for i in range(25)]
    cars, key = store.query(EventQuery(label="car", start_ns=1005, end_ns=1010), None, 100)
    assert key is None and [e.crop_id for e in cars] == ["c5", "c7", "c9"]
    assert store.count() == 25
    # Tracks: c0..c9 of track i % 3 + 1 except multiples of 4 (untracked); grouped, one
    # event per track (its latest) and each untracked one alone, paged like the rest.
    tracked = [
        store.submit(track_event(i, 0 if i % 4 == 0 else i % 3 + 1)).result(20).event
        for i in range(10)
    ]
    assert tracked[1].track_id == 2 and tracked[0].track_id == 0
    for size in (2, 100):
        grouped = all_pages(store, EventQuery(camera_id="trk", group_by_track=True), size)
        got = [(e.crop_id, e.track_id, e.track_events) for e in grouped]
        assert got == [
            ("t0", 0, 0),
            ("t4", 0, 0),
            ("t5", 3, 2),
            ("t7", 2, 2),
            ("t8", 0, 0),
            ("t9", 1, 3),
        ], got
    flat = all_pages(store, EventQuery(camera_id="trk"), 100)
    assert len(flat) == 10 and all(e.track_events == 0 for e in flat)
    seen = [(e.crop_id, e.edge_detection.label == "car", e.sequence) for e in paged]
    store.close()
    return seen


def test_both_back_ends_keep_one_schema_version() -> None:
    assert len(PG_MIGRATIONS) == len(SQLITE_MIGRATIONS) == SCHEMA_VERSION


def test_postgres_behaves_like_sqlite(pg_url: str, tmp_path: Path) -> None:
    sqlite = open_store(CloudStoreConfig(path=str(tmp_path / "e.sqlite")), CloudMetrics())
    pg = open_store(pg_config(pg_url), CloudMetrics())
    assert isinstance(pg, PostgresStore)
    assert "strata-test" not in pg.name  # the password never reaches a log line
    assert exercise(pg) == exercise(sqlite)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert {"events_camera_time", "events_time", "events_label_time"} <= indexes


def test_url_file_names_the_database(pg_url: str, tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text(pg_url + "\n")
    store = open_store(
        CloudStoreConfig(url_file=str(secret), connect_timeout_s=5.0), CloudMetrics()
    )
    assert isinstance(store, PostgresStore)
    store.close()
    secret.write_text("sqlite:///nope\n")
    with pytest.raises(StoreError, match="does not hold a postgresql:// URL"):
        open_store(CloudStoreConfig(url_file=str(secret)), CloudMetrics())
    with pytest.raises(StoreError, match=r"cannot read cloud\.store\.url_file"):
        open_store(CloudStoreConfig(url_file=str(tmp_path / "missing")), CloudMetrics())


def test_replicas_share_events_dedup_and_watch(pg_url: str) -> None:
    hubs = [WatchHub(CloudMetrics(), 4, 1000) for _ in range(2)]
    stores = [PostgresStore(pg_config(pg_url), pg_url, CloudMetrics(), hub) for hub in hubs]
    loop = LoopThread()  # watchers live on an event loop, as in the server
    subs = [loop.subscribe(hub) for hub in hubs]
    for s in stores:
        s.start()
    # The same 40 crops through both replicas at once: each is stored exactly once.
    futs = [[s.submit(event(i)) for i in range(40)] for s in stores]
    results = [[f.result(20) for f in fs] for fs in futs]
    for i in range(40):
        a, b = results[0][i], results[1][i]
        assert a.event.event_id == b.event.event_id
        assert sorted([a.duplicate, b.duplicate]) == [False, True]
    # Events only one replica wrote are read and watched through the other.
    only_a = [stores[0].submit(event(100 + i, edge="a")) for i in range(5)]
    only_b = [stores[1].submit(event(200 + i, edge="b")) for i in range(5)]
    ids = {f.result(20).event.event_id for f in only_a + only_b}
    for s in stores:
        assert s.count() == 50
        assert stores[1].find("a", "c100") is not None and stores[0].find("b", "c200")
    for sub in subs:
        assert sub is not None
        got: dict[int, analytics_pb2.Event] = {}
        deadline = time.monotonic() + 10
        while len(got) < 50 and time.monotonic() < deadline:
            try:
                ev = loop.next_event(sub, 0.5)
            except Exception:
                continue
            assert ev.event_id not in got, "an event was announced twice"
            got[ev.event_id] = ev
        assert len(got) == 50
        assert ids <= set(got)
        assert got[min(ids)].edge_detection.label == "person"  # event(100)
    for s in stores:
        s.close()
    loop.close()


def test_feed_break_ends_watchers_then_recovers(pg_url: str) -> None:
    metrics = CloudMetrics()
    hub = WatchHub(metrics, 4, 100)
    store = PostgresStore(pg_config(pg_url), pg_url, metrics, hub)
    store.start()
    loop = LoopThread()
    sub = loop.subscribe(hub)
    assert sub is not None
    with psycopg.connect(pg_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'strata-cloud-feed'"
        ).fetchall()
        assert killed == [(True,)]
    deadline = time.monotonic() + 10
    while not sub.dropped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sub.dropped and "connection lost" in sub.feed_lost
    assert sample(metrics.registry, "strata_cloud_event_feed_lost_total") == 1
    # Back within about a second; then a new watcher hears new events again.
    later = None
    while later is None and time.monotonic() < deadline + 10:
        try:
            later = loop.subscribe(hub)
        except WatchUnavailableError:
            time.sleep(0.1)
    assert later is not None
    stored = store.submit(event(1)).result(20)
    assert loop.next_event(later, 10).event_id == stored.event.event_id
    store.close()
    loop.close()


def test_concurrent_start_migrates_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    opened: list[PostgresStore] = []

    def open_one() -> None:
        try:
            opened.append(PostgresStore(pg_config(pg_url), pg_url, CloudMetrics()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(opened) == 4
    for s in opened:
        s.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)


def test_unreachable_database_is_a_clear_error(port: int) -> None:
    url = f"postgresql://strata:secret@127.0.0.1:{port}/strata"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="cannot open event store") as info:
        open_store(pg_config(url), CloudMetrics())
    assert time.monotonic() - t0 < 10
    assert "secret" not in str(info.value) and "***" in str(info.value)
    assert "refused" in str(info.value)


def test_wrong_password_is_a_clear_error(postgres: TempPostgres, pg_url: str) -> None:
    bad = postgres.url(pg_url.rsplit("/", 1)[1], password="not-it")
    with pytest.raises(StoreError, match="password authentication failed") as info:
        open_store(pg_config(bad), CloudMetrics())
    assert "not-it" not in str(info.value)


def test_newer_schema_is_refused_and_left_alone(pg_url: str) -> None:
    open_store(pg_config(pg_url), CloudMetrics()).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        open_store(pg_config(pg_url), CloudMetrics())
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (SCHEMA_VERSION + 1,)
        ]


def test_schema_2_table_migrates_to_model_versions(pg_url: str) -> None:
    """An existing table gains a nullable column: old events have no version, new ones do."""
    with psycopg.connect(pg_url) as conn:
        for statement in (*PG_MIGRATIONS[0], *PG_MIGRATIONS[1]):
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (2)")
        conn.execute(
            "INSERT INTO events (edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, "
            "stored_ns, label, score, detection, track_id) "
            "VALUES ('e', 'old', 'cam', 1, 5, 5, 5, 'car', 0.5, '', 3)"
        )
    store = open_store(pg_config(pg_url), CloudMetrics())
    store.start()
    try:
        for crop, version in (("v0", 0), ("v-max", 2**32 - 1)):
            ev = analytics_pb2.Event(
                edge_id="e", crop_id=crop, camera_id="cam", capture_ns=6, model_version=version
            )
            assert store.submit(ev).result(20).event.model_version == version
        old = store.find("e", "old")
        assert old is not None and not old.HasField("model_version") and old.track_id == 3
        page, _ = store.query(EventQuery(camera_id="cam"), None, 10)
        got = {e.crop_id: (e.model_version if e.HasField("model_version") else None) for e in page}
        assert got == {"old": None, "v0": 0, "v-max": 2**32 - 1}
    finally:
        store.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        rows = conn.execute("SELECT crop_id, model_version FROM events ORDER BY event_id")
        assert rows.fetchall() == [("old", None), ("v0", 0), ("v-max", 2**32 - 1)]


def test_failed_migration_leaves_nothing_half_written(pg_url: str) -> None:
    # A table in the way of migration 1: it fails midway and everything rolls back.
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE events (x INTEGER)")
    with pytest.raises(StoreError, match="already exists"):
        open_store(pg_config(pg_url), CloudMetrics())
    with psycopg.connect(pg_url) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
    assert tables == {"events"}  # no schema_version, no index: the transaction rolled back


def test_payloads_fit_a_notify_and_round_trip() -> None:
    ids = list(range(10**15, 10**15 + 2000))
    parts = payloads(ids)
    assert len(parts) > 1 and all(len(p) < 8000 for p in parts)
    assert [i for p in parts for i in parse_payload(p)] == ids
    assert payloads([]) == []


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:pw@db.example:5433/ev?sslmode=require") == (
        "postgresql://u:***@db.example:5433/ev?sslmode=require"
    )
    assert redact("postgresql://u@db/ev") == "postgresql://u@db/ev"


T = TypeVar("T")


def retry_store_error(fn: Callable[[], T], timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_database_crash_loses_no_acked_event_and_the_store_recovers(
    postgres: TempPostgres, pg_url: str
) -> None:
    metrics = CloudMetrics()
    hub = WatchHub(metrics, 4, 1000)
    store = PostgresStore(pg_config(pg_url, connect_timeout_s=2.0), pg_url, metrics, hub)
    store.start()
    loop = LoopThread()  # watchers live on an event loop, as in the server
    sub = loop.subscribe(hub)
    assert sub is not None
    acked = {
        r.event.crop_id: r.event.event_id
        for r in (f.result(20) for f in [store.submit(event(i)) for i in range(200)])
    }
    postgres.crash()
    try:
        # Down: a write is refused (the crop gets RETRY upstream), never acked; so is a read.
        with pytest.raises(StoreError, match="write failed"):
            store.submit(event(1000)).result(30)
        with pytest.raises(StoreError, match="read failed"):
            store.find("e", "c1")
        deadline = time.monotonic() + 10
        while not sub.feed_lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sub.feed_lost, "watchers must learn that events may be missed"
        with pytest.raises(WatchUnavailableError):
            loop.subscribe(hub)
    finally:
        postgres.start_again()
    # Back: every acked event survived the crash (recovered from the WAL), writes work again.
    later = None
    deadline = time.monotonic() + 20
    while later is None and time.monotonic() < deadline:
        try:
            later = loop.subscribe(hub)
        except WatchUnavailableError:
            time.sleep(0.1)
    assert later is not None
    # The pool replaces its broken connections as they are asked for: a caller may get a
    # StoreError (RETRY upstream) for a moment after the database is back.
    rows = retry_store_error(lambda: all_pages(store, EventQuery(), 1000))
    assert {e.crop_id: e.event_id for e in rows} == acked
    stored = retry_store_error(lambda: store.submit(event(1000)).result(20))
    assert not stored.duplicate
    assert loop.next_event(later, 10).event_id == stored.event.event_id
    store.close()
    loop.close()
