"""Track snapshots in the store (cloud/store/snapshot_rows.py through both back ends): one per
track and kind, the highest revision kept, found by event key, snapshot id or track; a
schema 4 store migrates in place; replicas on one PostgreSQL share every snapshot."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from cloud_helpers import decodes, snapshot, track_event
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.registry import (
    SCHEMA_VERSION,
    EventStore,
    SnapshotLookupError,
    SnapshotQuery,
    open_store,
)
from strata.cloud.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.contracts import events_pb2

BEST, FRAME = events_pb2.SNAPSHOT_KIND_BEST_CROP, events_pb2.SNAPSHOT_KIND_FULL_FRAME


def pg_config(url: str) -> CloudStoreConfig:
    return CloudStoreConfig(url=url, write_delay_ms=1.0, connect_timeout_s=5.0)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite":
        cfg = CloudStoreConfig(path=str(tmp_path / "e.sqlite"), write_delay_ms=1.0)
    else:
        cfg = pg_config(request.getfixturevalue("pg_url"))
    s = open_store(cfg, CloudMetrics())
    s.start()
    yield s
    s.close()


def put(store: EventStore, snap: events_pb2.Snapshot) -> tuple[str, bool]:
    got = store.submit_snapshot(snap).result(20)
    return got.snapshot_id, got.duplicate


def test_highest_revision_per_track_and_kind_is_kept(store: EventStore) -> None:
    first = snapshot(revision=0)
    assert put(store, first) == (first.snapshot_id, False)
    assert put(store, first) == (first.snapshot_id, True), "a resend changes nothing"
    better = snapshot(revision=2)
    assert put(store, better) == (better.snapshot_id, False)
    late = snapshot(revision=1)
    # A lower revision arriving late is a duplicate that names what is kept.
    assert put(store, late) == (better.snapshot_id, True)
    frame = snapshot(kind="full_frame", revision=0)
    assert put(store, frame) == (frame.snapshot_id, False)
    other = snapshot(track=(2_000, 8), revision=5)
    assert put(store, other) == (other.snapshot_id, False)
    assert store.count_snapshots() == 3

    row = store.find_snapshot(SnapshotQuery(camera_id="door", track_uid="1000-7"))
    assert row is not None and row.snapshot == better and row.stored_ns > 0
    assert decodes(row.snapshot.jpeg) == (64, 48)
    # The replaced id still finds its track's current snapshot of its kind.
    by_old = store.find_snapshot(SnapshotQuery(snapshot_id=first.snapshot_id))
    assert by_old is not None and by_old.snapshot.revision == 2
    by_frame = store.find_snapshot(SnapshotQuery(snapshot_id=frame.snapshot_id))
    assert by_frame is not None and by_frame.snapshot.kind == FRAME
    assert decodes(by_frame.snapshot.jpeg) == (160, 120)
    # By the key of one of the track's events, any kind.
    ev = track_event(1)
    ev.crop_snapshot_id = first.snapshot_id
    store.submit_track(ev).result(20)
    got = store.find_snapshot(SnapshotQuery(event_key=ev.idempotency_key, kind=FRAME))
    assert got is not None and got.snapshot.snapshot_id == frame.snapshot_id
    # A bare uid, unique over cameras.
    alone = store.find_snapshot(SnapshotQuery(track_uid="2000-8"))
    assert alone is not None and alone.snapshot.revision == 5


def test_lookups_that_name_no_single_track(store: EventStore) -> None:
    put(store, snapshot(camera="door"))
    put(store, snapshot(camera="yard"))
    with pytest.raises(SnapshotLookupError, match=r"several cameras \(door, yard\)"):
        store.find_snapshot(SnapshotQuery(track_uid="1000-7"))
    with pytest.raises(SnapshotLookupError, match="exactly one"):
        store.find_snapshot(SnapshotQuery(track_uid="1000-7", event_key="door/1000-7/0/new"))
    with pytest.raises(SnapshotLookupError, match="not '<first_seen_ns>-<track_id>'"):
        store.find_snapshot(SnapshotQuery(track_uid="seven"))
    with pytest.raises(SnapshotLookupError, match="snapshot id"):
        store.find_snapshot(SnapshotQuery(snapshot_id="door/1000-7/thumb/0"))
    with pytest.raises(LookupError, match="no stored track event"):
        store.find_snapshot(SnapshotQuery(event_key="door/1000-7/9/end"))
    with pytest.raises(LookupError, match="no stored track 5-5"):
        store.find_snapshot(SnapshotQuery(track_uid="5-5"))
    # The track is known, this kind is not stored.
    assert (
        store.find_snapshot(SnapshotQuery(camera_id="door", track_uid="1000-7", kind=FRAME)) is None
    )


def test_snapshots_share_transactions_with_events_in_order(store: EventStore) -> None:
    """A snapshot submitted before the event naming it is committed with or before it."""
    snap = snapshot(revision=0)
    ev = track_event(1)
    ev.crop_snapshot_id = snap.snapshot_id
    f_snap = store.submit_snapshot(snap)
    f_ev = store.submit_track(ev)
    assert not f_ev.result(20).duplicate and not f_snap.result(20).duplicate
    assert store.find_snapshot(SnapshotQuery(event_key=ev.idempotency_key)) is not None


def test_schema_4_sqlite_store_migrates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(path)
    for migration in SQLITE_MIGRATIONS[:4]:
        for statement in migration:
            conn.execute(statement)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (4)")
    conn.commit()
    conn.close()
    store = open_store(CloudStoreConfig(path=str(path), write_delay_ms=1.0), CloudMetrics())
    store.start()
    try:
        assert not put(store, snapshot())[1]
        assert store.count_snapshots() == 1
    finally:
        store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


def test_replicas_race_on_one_track_and_keep_the_highest(pg_url: str) -> None:
    """Two replicas store revisions of one track's snapshot at once: one row survives, the
    highest revision, and every replica serves it."""
    stores = [open_store(pg_config(pg_url), CloudMetrics()) for _ in range(2)]
    for s in stores:
        s.start()
    errors: list[BaseException] = []

    def send(s: EventStore, revisions: range) -> None:
        try:
            for r in revisions:
                s.submit_snapshot(snapshot(revision=r)).result(20)
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [
            threading.Thread(target=send, args=(stores[0], range(0, 20, 2))),
            threading.Thread(target=send, args=(stores[1], range(1, 20, 2))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        for s in stores:
            row = s.find_snapshot(SnapshotQuery(camera_id="door", track_uid="1000-7"))
            assert row is not None and row.snapshot.revision == 19
            decodes(row.snapshot.jpeg)
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT COUNT(*) FROM snapshots").fetchone() == (1,)
    finally:
        for s in stores:
            s.close()
