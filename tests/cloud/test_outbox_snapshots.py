"""The MQTT sink's snapshots (cloud/outbox/snapshots.py) against a real mosquitto: a track
event naming a snapshot publishes the track's best crop, retained, on
strata/<camera>/<label>/snapshot, once per stored snapshot; the event JSON carries the ids
(and Frigate's has_snapshot), as a webhook's JSON does: ids, never the bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloud_helpers import decodes, snapshot, track_event
from outbox_helpers import Broker, Subscriber, started_broker, started_store, wait_for
from strata.cloud.metrics import CloudMetrics
from strata.cloud.outbox.mqtt import MqttSink
from strata.cloud.outbox.snapshots import SnapshotReader
from strata.cloud.outbox.worker import SinkWorker, WorkerParts
from strata.cloud.store.event_store import EventStore
from strata.shared.config.cloud import CloudStoreConfig
from strata.shared.config.sinks import MqttSinkConfig, SinksConfig

FAST = {"start": "all", "poll_s": 0.05, "lease_s": 5.0, "retry_s": 0.1, "max_retry_s": 0.5}
A = (1_000_000, 7)
TOPIC = "strata/door/person/snapshot"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[EventStore, CloudStoreConfig]]:
    yield from started_store(tmp_path)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from started_broker(tmp_path)


def test_a_track_event_publishes_its_tracks_best_crop_once(
    broker: Broker, store: tuple[EventStore, CloudStoreConfig]
) -> None:
    s, cfg = store
    first, frame = snapshot(track=A), snapshot(track=A, kind="full_frame")
    s.submit_snapshot(first).result(20)
    s.submit_snapshot(frame).result(20)
    new = track_event(1, track=A, track_sequence=0)
    new.crop_snapshot_id, new.frame_snapshot_id = first.snapshot_id, frame.snapshot_id
    update = track_event(2, track=A, kind="zone_entered", track_sequence=1, zone="porch")
    update.crop_snapshot_id = first.snapshot_id  # the same snapshot: not published again
    for ev in (new, update):
        s.submit_track(ev).result(20)
    sub = Subscriber(broker.port, ["strata/#"])
    metrics = CloudMetrics()
    sink_cfg = MqttSinkConfig.model_validate({"port": broker.port, "keepalive_s": 5})
    parts = WorkerParts(cfg, SinksConfig.model_validate(FAST), metrics.sinks, "r1")
    w = SinkWorker(MqttSink(sink_cfg, metrics.sinks, SnapshotReader(cfg)), parts)
    w.start()
    try:
        wait_for(lambda: len(sub.on("strata/events")) == 2, 20, "2 events")
        time.sleep(0.3)
        assert sub.on(TOPIC) == [first.jpeg]
        assert decodes(sub.on(TOPIC)[0]) == (64, 48)
        got = sub.events("strata/events")
        assert got[0]["after"]["has_snapshot"] is True
        assert got[0]["strata"]["snapshot_id"] == first.snapshot_id
        assert got[0]["strata"]["frame_snapshot_id"] == frame.snapshot_id
        assert "frame_snapshot_id" not in got[1]["strata"]
        # A better snapshot, then the end event naming it: published again.
        better = snapshot(track=A, revision=3)
        s.submit_snapshot(better).result(20)
        end = track_event(3, track=A, kind="end", track_sequence=2)
        end.crop_snapshot_id = better.snapshot_id
        s.submit_track(end).result(20)
        wait_for(lambda: len(sub.on(TOPIC)) == 2, 20, "the better snapshot")
        assert sub.on(TOPIC)[1] == better.jpeg
    finally:
        w.stop()
        sub.close()
    # Retained: a client that comes later gets the latest.
    late = Subscriber(broker.port, [TOPIC])
    try:
        wait_for(lambda: bool(late.on(TOPIC)), 10, "the retained snapshot")
        assert late.on(TOPIC) == [better.jpeg]
    finally:
        late.close()
