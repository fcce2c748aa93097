"""Track events in the store (cloud/store/track_rows.py through both back ends): stored once per
idempotency key, in the order sent, filtered and paged, the track's verdict joined from its
classified crops; schema 3 stores migrate in place; replicas on one PostgreSQL share them."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cloud_helpers import LoopThread, track_event
from strata.cloud.api.watch import WatchHub
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.postgres import MIGRATIONS as PG_MIGRATIONS
from strata.cloud.store.postgres import PostgresStore
from strata.cloud.store.registry import (
    SCHEMA_VERSION,
    EventQuery,
    EventStore,
    TrackPageKey,
    TrackQuery,
    open_store,
)
from strata.cloud.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from strata.cloud.store.track_filter import parse_type
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import analytics_pb2, events_pb2

# (first_seen_ns, tracker id); event `seq` is captured at 1_000_000 + seq * 1000.
A = (1_000_000, 7)  # door: a person, tracker id 7
B = (1_002_500, 8)  # door: a car
C = (1_006_500, 7)  # door: a later track that reused id 7 (tracker restarted)
Y = (1_000_500, 7)  # yard: same tracker id, another camera


def pg_config(url: str) -> CloudStoreConfig:
    return CloudStoreConfig(url=url, write_delay_ms=1.0, connect_timeout_s=5.0)


def door_and_yard() -> list[events_pb2.TrackEvent]:
    """Ten events over two cameras, in the order an edge emits them (sequence per camera)."""
    return [
        track_event(1, track=A, kind="new", track_sequence=0),
        track_event(2, track=A, kind="zone_entered", zone="shop", rule="shop-entry"),
        track_event(3, track=B, kind="new", label="car", track_sequence=0),
        track_event(
            4,
            track=A,
            kind="line_crossed",
            line="entry",
            rule="count-entry",
            direction=events_pb2.CROSSING_DIRECTION_IN,
            observed=False,
        ),
        track_event(5, track=B, kind="dwell_exceeded", zone="shop", dwell_s=12.5, label="car"),
        track_event(6, track=A, kind="end"),
        track_event(1, camera="yard", track=Y, kind="new", track_sequence=0),
        track_event(7, track=C, kind="new", track_sequence=0),
        track_event(
            8,
            track=C,
            kind="line_crossed",
            line="entry",
            direction=events_pb2.CROSSING_DIRECTION_OUT,
        ),
        track_event(9, track=C, kind="zone_left", zone="shop", dwell_s=3.0),
    ]


def crop(crop_id: str, camera: str, track_id: int, capture_ns: int, label: str) -> Any:
    return analytics_pb2.Event(
        edge_id="edge-a",
        crop_id=crop_id,
        camera_id=camera,
        capture_ns=capture_ns,
        label=label,
        score=0.75,
        track_id=track_id,
        model_version=3,
    )


def keys(events: list[events_pb2.StoredTrackEvent]) -> list[str]:
    return [s.event.idempotency_key for s in events]


def pages(store: EventStore, q: TrackQuery, size: int) -> list[events_pb2.StoredTrackEvent]:
    out: list[events_pb2.StoredTrackEvent] = []
    key: TrackPageKey | None = None
    for _ in range(100):
        page, key = store.query_tracks(q, key, size)
        out += page
        if key is None:
            return out
    raise AssertionError("paging did not end")


def exercise(store: EventStore) -> list[tuple[Any, ...]]:
    """The same writes and reads on any back end; returns what a caller can observe."""
    store.start()
    sent = door_and_yard()
    # All handed over before any commits: one or a few transactions, in this order.
    futs = [store.submit_track(ev) for ev in sent]
    got = [f.result(20) for f in futs]
    assert not any(g.duplicate for g in got)
    ids = [g.stored.stored_id for g in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), "stored in the order sent"
    assert got[3].stored.event == sent[3] and got[3].stored.stored_ns > 0
    # The same key again (a resend, or another edge after a takeover): DUPLICATE, same row;
    # twice in one transaction too. A different event of the same track is not a duplicate.
    again = [store.submit_track(sent[3]), store.submit_track(sent[3])]
    assert [(f.result(20).duplicate, f.result(20).stored.stored_id) for f in again] == [
        (True, ids[3]),
        (True, ids[3]),
    ]
    other = track_event(10, track=A, kind="update")
    both = [store.submit_track(other), store.submit_track(other)]
    assert [f.result(20).duplicate for f in both] == [False, True]
    assert store.count_tracks() == 11

    everything = pages(store, TrackQuery(), 3)
    order = [(s.event.camera_id, s.event.sequence) for s in everything]
    door = [seq for cam, seq in order if cam == "door"]
    assert door == sorted(door) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "per-camera order"
    assert len(everything) == 11
    crossing = next(s for s in everything if s.event.idempotency_key == sent[3].idempotency_key)
    assert crossing.event.path.points[0].y == pytest.approx(0.9)
    assert crossing.event.direction == events_pb2.CROSSING_DIRECTION_IN
    assert not crossing.event.observed and not crossing.event.HasField("verdict")

    def only(**kw: Any) -> list[str]:
        return keys(pages(store, TrackQuery(**kw), 100))

    k = [ev.idempotency_key for ev in sent]
    line_crossed = parse_type("line_crossed")
    assert only(camera_id="yard") == [k[6]]
    assert only(types=(line_crossed,)) == [k[3], k[8]]
    assert only(types=(line_crossed, parse_type("end"))) == [k[3], k[5], k[8]]
    assert only(zone="shop") == [k[1], k[4], k[9]]
    assert only(line="entry", camera_id="door") == [k[3], k[8]]
    assert only(rule="count-entry") == [k[3]]
    assert only(track_uid=f"{B[0]}-{B[1]}") == [k[2], k[4]]
    assert only(track_id=7, camera_id="door", types=(parse_type("new"),)) == [k[0], k[7]]
    assert only(label="car") == [k[2], k[4]]
    window = only(start_ns=sent[1].capture_ns, end_ns=sent[3].capture_ns, camera_id="door")
    assert window == [k[1], k[2]]
    assert only(zone="nowhere") == []

    # Verdicts: the latest classified crop of the same camera and tracker id within the
    # track's life (until a later track reused the id); read at query time.
    crops = [
        crop("a1", "door", 7, A[0] + 500, "red"),
        crop("a2", "door", 7, A[0] + 800, "blue"),  # A's latest
        crop("y1", "yard", 7, Y[0] + 10, "green"),  # another camera
        crop("c1", "door", 7, C[0] + 10, "white"),  # the track that reused id 7
        crop("u1", "door", 0, A[0] + 900, "black"),  # untracked
    ]
    stored_crops = {c.crop_id: store.submit(c).result(20).event for c in crops}
    by_track: dict[str, tuple[str, int, int]] = {}
    for s in pages(store, TrackQuery(), 4):
        v = s.event.verdict
        got_v = (v.label, v.event_id, v.model_version) if s.event.HasField("verdict") else None
        prev = by_track.setdefault(s.event.track_uid, got_v)  # type: ignore[arg-type]
        assert prev == got_v, "every event of a track carries the same verdict"
    assert by_track == {
        f"{A[0]}-7": ("blue", stored_crops["a2"].event_id, 3),
        f"{B[0]}-8": None,
        f"{Y[0]}-7": ("green", stored_crops["y1"].event_id, 3),
        f"{C[0]}-7": ("white", stored_crops["c1"].event_id, 3),
    }
    # QueryEvents narrowed to one track's crops (track_uid: that life of the id).
    a_crops, _ = store.query(EventQuery(camera_id="door", track_uid=f"{A[0]}-7"), None, 100)
    assert [e.crop_id for e in a_crops] == ["a1", "a2"]
    id7, _ = store.query(EventQuery(camera_id="door", track_id=7), None, 100)
    assert [e.crop_id for e in id7] == ["a1", "a2", "c1"]
    # By stored ids (what the commit feed reads), verdict joined.
    fed = store.tracks_by_ids([ids[5], ids[0]])
    assert [s.stored_id for s in fed] == [ids[0], ids[5]]
    assert all(s.event.verdict.label == "blue" for s in fed)
    observed = [(s.event.idempotency_key, s.event.verdict.label) for s in everything]
    store.close()
    return observed


def test_both_back_ends_are_at_schema_8() -> None:
    assert SCHEMA_VERSION == 8 == len(SQLITE_MIGRATIONS) == len(PG_MIGRATIONS)


def test_sqlite_stores_filters_and_attaches_verdicts(tmp_path: Path) -> None:
    store = open_store(CloudStoreConfig(path=str(tmp_path / "e.sqlite")), CloudMetrics())
    exercise(store)
    # The tracks view: one row per track with its verdict's crop id.
    conn = sqlite3.connect(tmp_path / "e.sqlite")
    rows = conn.execute(
        "SELECT t.camera_id, t.track_uid, t.events, t.end_capture_ns IS NOT NULL, e.label "
        "FROM tracks t LEFT JOIN events e ON e.event_id = t.verdict_event_id "
        "ORDER BY t.camera_id, t.first_seen_ns"
    ).fetchall()
    assert rows == [
        ("door", f"{A[0]}-7", 5, 1, "blue"),
        ("door", f"{B[0]}-8", 2, 0, None),
        ("door", f"{C[0]}-7", 3, 0, "white"),
        ("yard", f"{Y[0]}-7", 1, 0, "green"),
    ]
    plan = " ".join(
        str(r)
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT stored_id FROM track_events WHERE zone = 'shop' "
            "AND capture_ns >= 0 ORDER BY capture_ns"
        )
    )
    assert "track_events_zone_time" in plan


def test_postgres_behaves_like_sqlite(pg_url: str, tmp_path: Path) -> None:
    sqlite = open_store(CloudStoreConfig(path=str(tmp_path / "e.sqlite")), CloudMetrics())
    pg = open_store(pg_config(pg_url), CloudMetrics())
    assert isinstance(pg, PostgresStore)
    assert exercise(pg) == exercise(sqlite)
    with psycopg.connect(pg_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert {"track_events_camera_time", "track_events_zone_time", "events_camera_track"} <= (
            indexes
        )
        view = conn.execute("SELECT count(*), count(verdict_event_id) FROM tracks").fetchone()
        assert view == (4, 3)


def _old_crop_sql(ph: str) -> str:
    return (
        "INSERT INTO events (edge_id, crop_id, camera_id, sequence, capture_ns, time_ns, "
        "stored_ns, label, score, detection, track_id, model_version) "
        f"VALUES ('e', 'old', 'door', 1, {ph}, {ph}, 5, 'red', 0.5, '', 7, 2)"
    )


def _after_migration(store: EventStore) -> None:
    """A schema 3 store with one classified crop of tracker id 7 now takes track events, and
    the old crop is the verdict of the track it belongs to."""
    store.start()
    try:
        stored = store.submit_track(track_event(1, track=A)).result(20)
        assert not stored.duplicate
        (got,), _ = store.query_tracks(TrackQuery(), None, 10)
        assert got.event.verdict.label == "red" and got.event.verdict.model_version == 2
        old, _ = store.query(EventQuery(), None, 10)
        assert [e.crop_id for e in old] == ["old"]
    finally:
        store.close()


def test_schema_3_sqlite_store_migrates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    for migration in SQLITE_MIGRATIONS[:3]:
        for statement in migration:
            conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (3)")
    conn.execute(_old_crop_sql("?"), (A[0] + 5, A[0] + 5))
    conn.commit()
    conn.close()
    _after_migration(open_store(CloudStoreConfig(path=str(path)), CloudMetrics()))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_schema_3_postgres_store_migrates_in_place(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        for migration in PG_MIGRATIONS[:3]:
            for statement in migration:
                conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (3)")
        conn.execute(_old_crop_sql("%s"), (A[0] + 5, A[0] + 5))
    _after_migration(open_store(pg_config(pg_url), CloudMetrics()))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_replicas_store_a_key_once_and_every_replica_watches_it(pg_url: str) -> None:
    hubs = [WatchHub(CloudMetrics(), 4, 1000) for _ in range(2)]
    stores = [PostgresStore(pg_config(pg_url), pg_url, CloudMetrics(), hub) for hub in hubs]
    loop = LoopThread()
    subs = [loop.subscribe_tracks(hub, TrackQuery(camera_id="door")) for hub in hubs]
    crops_sub = loop.subscribe(hubs[1])
    for s in stores:
        s.start()
    try:
        # A crop of track A first, so the watched events carry its verdict.
        verdict = stores[1].submit(crop("a1", "door", 7, A[0] + 1, "red")).result(20).event
        sent = [track_event(i + 1, track=A, kind="update") for i in range(20)]
        # The same 20 events through both replicas at once (a camera moved mid-stream):
        # each key is stored exactly once.
        futs = [[s.submit_track(ev) for ev in sent] for s in stores]
        results = [[f.result(20) for f in fs] for fs in futs]
        for a, b in zip(*results, strict=True):
            assert a.stored.stored_id == b.stored.stored_id
            assert sorted([a.duplicate, b.duplicate]) == [False, True]
        stores[0].submit_track(track_event(1, camera="yard", track=Y)).result(20)
        for sub in subs:
            assert sub is not None
            got = [loop.next_event(sub, 10) for _ in range(20)]
            assert [g.event.sequence for g in got] == list(range(1, 21))
            assert {g.event.verdict.event_id for g in got} == {verdict.event_id}
            time.sleep(0.2)
            assert not sub.queue, "filtered: the yard event is not the door watcher's"
        assert crops_sub is not None and loop.next_event(crops_sub, 10).crop_id == "a1"
        assert not crops_sub.queue, "track events are not crop events"
    finally:
        for s in stores:
            s.close()
        loop.close()
