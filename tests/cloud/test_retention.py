"""Retention (cloud/store/retention.py) on both back ends: tracks older than their label's or rules'
days leave with their track events, snapshots and clips (a clip with the last track it
shows), counted; forever means forever; a long
history goes in several transactions; the server prunes in the background."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clip_helpers import chunk, info
from cloud_helpers import make_config, snapshot, track_event
from strata.cloud.metrics import CloudMetrics
from strata.cloud.server import CloudServer
from strata.cloud.store.registry import ClipQuery, EventStore, SnapshotQuery, TrackQuery, open_store
from strata.cloud.store.retention import DAY_NS, Pruner, RetentionPolicy, prune
from strata.shared.config.cloud import CloudRetentionConfig, CloudStoreConfig
from strata.shared.metrics import sample

NOW = 1_000 * DAY_NS


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite":
        cfg = CloudStoreConfig(path=str(tmp_path / "e.sqlite"), write_delay_ms=1.0)
    else:
        url = request.getfixturevalue("pg_url")
        cfg = CloudStoreConfig(url=url, write_delay_ms=1.0, connect_timeout_s=5.0)
    s = open_store(cfg, CloudMetrics())
    s.start()
    yield s
    s.close()


def add_track(
    store: EventStore, n: int, age_days: float, label: str, rule: str = "", camera: str = "door"
) -> str:
    """A track of three events (the last `age_days` before NOW) and two snapshots; its uid."""
    last = NOW - int(age_days * DAY_NS)
    first = last - 3_000
    track = (first, n)
    kinds = ["new", "zone_entered" if rule else "update", "end"]
    for i, kind in enumerate(kinds):
        fields = {"zone": "shop", "rule": rule} if kind == "zone_entered" else {}
        ev = track_event(
            n * 10 + i + 1,
            camera=camera,
            track=track,
            kind=kind,
            label=label,
            track_sequence=i,
            capture_ns=first + 1_000 * (i + 1),
            **fields,
        )
        store.submit_track(ev).result(20)
    for kind in ("best_crop", "full_frame"):
        snap = snapshot(camera=camera, track=track, kind=kind, label=label, capture_ns=last)
        store.submit_snapshot(snap).result(20)
    return f"{first}-{n}"


def uids(store: EventStore) -> set[str]:
    events, _ = store.query_tracks(TrackQuery(), None, 1000)
    return {e.event.track_uid for e in events}


def test_tracks_go_by_label_and_rule_with_their_events_and_snapshots(store: EventStore) -> None:
    cfg = CloudRetentionConfig(days=10, labels={"car": 2, "cat": 0}, rules={"entry": 30})
    old_person = add_track(store, 1, 11, "person")
    young_person = add_track(store, 2, 9, "person")
    old_car = add_track(store, 3, 3, "car")
    young_car = add_track(store, 4, 1, "car")
    car_by_rule = add_track(store, 5, 20, "car", rule="entry")  # the rule keeps it 30 days
    ancient_cat = add_track(store, 6, 900, "cat")  # 0: forever
    orphan = snapshot(track=(NOW - 50 * DAY_NS, 9), label="person", capture_ns=NOW - 50 * DAY_NS)
    store.submit_snapshot(orphan).result(20)
    young_orphan = snapshot(track=(NOW - DAY_NS, 10), label="person", capture_ns=NOW - DAY_NS)
    store.submit_snapshot(young_orphan).result(20)
    assert store.count_snapshots() == 14

    got, done = prune(store, RetentionPolicy(cfg), NOW, batch=500)
    assert done
    assert (got.tracks, got.track_events, got.snapshots) == (3, 6, 5)
    assert uids(store) == {young_person, young_car, car_by_rule, ancient_cat}
    assert store.count_snapshots() == 9
    for gone in (old_person, old_car):
        q = SnapshotQuery(camera_id="door", track_uid=gone)
        assert store.find_snapshot(q) is None
    assert store.find_snapshot(SnapshotQuery(snapshot_id=young_orphan.snapshot_id)) is not None
    # Nothing more is due: a second pass deletes nothing.
    again, _ = prune(store, RetentionPolicy(cfg), NOW, batch=500)
    assert again.tracks == again.track_events == again.snapshots == 0


def add_clip(store: EventStore, n: int, tracks: tuple[str, ...], start_ns: int) -> int:
    """A final clip of `n` KB showing the tracks; its size."""
    data = bytes([n]) * n * 1024
    ci = info(clip_id=f"door/s/{n}", tracks=tracks, start_ns=start_ns)
    assert store.append_clip(chunk(data, 0, len(data), ci, last=True)).complete
    return len(data)


def test_a_clip_goes_with_the_last_of_its_tracks(store: EventStore) -> None:
    cfg = CloudRetentionConfig(days=10, labels={"car": 2})
    person = add_track(store, 1, 5, "person")  # kept
    car = add_track(store, 2, 5, "car")  # expired
    add_clip(store, 1, (person, car), NOW - 5 * DAY_NS)
    car_only = add_clip(store, 2, (car,), NOW - 5 * DAY_NS)
    old_orphan = add_clip(store, 3, ("77-7",), NOW - 11 * DAY_NS)  # no events: by `days`
    add_clip(store, 4, ("78-8",), NOW - 9 * DAY_NS)
    pruner = Pruner(store, cfg, store.metrics, lambda: NOW)
    got = pruner.run_once()
    assert (got.tracks, got.clips, got.clip_bytes) == (1, 2, car_only + old_orphan)
    assert store.count_clips() == 2
    for gone in ("door/s/2", "door/s/3"):
        assert store.find_clip(ClipQuery(clip_id=gone)) is None
        assert store.clip_pieces(gone, 0, 10) == []
    shared = store.find_clip(ClipQuery(camera_id="door", track_uid=person))
    assert shared is not None and shared.committed_bytes == 1024
    # The car no longer finds the clip it shared; the person still does.
    assert store.find_clip(ClipQuery(camera_id="door", track_uid=car)) is None
    m = store.metrics.registry
    assert sample(m, "strata_cloud_retention_pruned_total", {"what": "clips"}) == 2
    bytes_gone = sample(m, "strata_cloud_retention_pruned_total", {"what": "clip_bytes"})
    assert bytes_gone == car_only + old_orphan
    again = pruner.run_once()
    assert again.clips == 0 and store.count_clips() == 2


def test_a_long_history_goes_in_bounded_transactions(store: EventStore) -> None:
    for n in range(1, 8):
        add_track(store, n, 5, "person", camera="yard" if n % 2 else "door")
    pruner = Pruner(store, CloudRetentionConfig(days=1, prune_batch=2), store.metrics, lambda: NOW)
    got = pruner.run_once()
    assert (got.tracks, got.track_events, got.snapshots) == (7, 21, 14)
    assert not uids(store) and store.count_snapshots() == 0
    m = store.metrics.registry
    assert sample(m, "strata_cloud_retention_pruned_total", {"what": "tracks"}) == 7
    assert sample(m, "strata_cloud_retention_pruned_total", {"what": "track_events"}) == 21
    assert sample(m, "strata_cloud_retention_pruned_total", {"what": "snapshots"}) == 14


def test_forever_by_default(store: EventStore) -> None:
    add_track(store, 1, 990, "person")
    cfg = CloudRetentionConfig()
    assert not cfg.active
    got, _ = prune(store, RetentionPolicy(cfg), NOW, batch=10)
    assert got.tracks == 0 and len(uids(store)) == 1


def test_the_server_prunes_in_the_background(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[..., CloudServer],
) -> None:
    model, labels = colour_model
    cfg = make_config(
        model,
        tmp_path / "events.sqlite",
        labels,
        snapshots={"retention": {"days": 1, "prune_every_s": 0.2}},
    )
    server = start_server(cfg)
    assert server.pruner is not None
    old = NOW // 1000  # far in the past on the real clock
    ev = track_event(1, capture_ns=old, track=(old - 10, 3))
    server.store.submit_track(ev).result(20)
    server.store.submit_snapshot(snapshot(track=(old - 10, 3), capture_ns=old)).result(20)
    deadline = time.monotonic() + 20
    m = server.metrics.registry
    while time.monotonic() < deadline:
        if sample(m, "strata_cloud_retention_pruned_total", {"what": "tracks"}) == 1:
            break
        time.sleep(0.1)
    assert sample(m, "strata_cloud_retention_pruned_total", {"what": "snapshots"}) == 1
    assert server.store.count_tracks() == 0 and server.store.count_snapshots() == 0
