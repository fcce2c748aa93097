"""Track events through a real server on 127.0.0.1 (cloud/api/track_service.py): acked per event on
the Uplink stream, queried with filters and the track's verdict, watched live; RETRY while
PostgreSQL is down."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cloud_helpers import jpeg, make_config, read_watch, stub_for, track_event
from strata.cloud.server import CloudServer
from strata.cloud.store.track_filter import parse_type
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, common_pb2, current_version, events_pb2
from strata.shared.metrics import sample
from strata.tools.postgres_temp import TempPostgres

S = events_pb2
RED, BLUE = (0, 0, 255), (255, 0, 0)  # BGR
A = (1_000_000, 7)  # (first_seen_ns, tracker id) of the door's person


def batch(events: list[Any], crops: tuple[Any, ...] | list[Any] = ()) -> Any:
    return analytics_pb2.CropBatch(version=current_version(), events=events, crops=list(crops))


def crop(crop_id: str, bgr: tuple[int, int, int], track_id: int, capture_ns: int) -> Any:
    return analytics_pb2.Crop(
        crop_id=crop_id,
        edge_id="edge-a",
        camera_id="door",
        sequence=capture_ns,
        detection=common_pb2.Detection(score=0.7, class_id=0, label="person", track_id=track_id),
        encoding=common_pb2.ENCODING_JPEG,
        image=jpeg(bgr),
        timing=common_pb2.Timing(capture_ns=capture_ns),
        track_id=track_id,
    )


def uplink(stub: Any, batches: list[analytics_pb2.CropBatch]) -> list[Any]:
    out = list(stub.Uplink(iter(batches), timeout=30))
    assert all(r.version.minor >= 1 for r in out), "the edge needs minor >= 1 to trust acks"
    return out


def track_query(stub: Any, **kw: Any) -> list[events_pb2.StoredTrackEvent]:
    req = analytics_pb2.QueryEventsRequest(version=current_version(), **kw)
    return [ev for page in stub.QueryTrackEvents(req, timeout=10) for ev in page.events]


def door_story() -> list[events_pb2.TrackEvent]:
    return [
        track_event(1, track=A, kind="new", track_sequence=0),
        track_event(2, track=A, kind="zone_entered", zone="shop", rule="shop-entry"),
        track_event(
            3,
            track=A,
            kind="line_crossed",
            line="entry",
            rule="count-entry",
            direction=S.CROSSING_DIRECTION_IN,
        ),
        track_event(4, track=A, kind="end"),
    ]


def test_events_are_acked_stored_then_duplicate_and_a_bad_one_is_invalid(
    colour_server: CloudServer,
) -> None:
    channel, stub = stub_for(colour_server)
    story = door_story()
    bad = track_event(9, track=A, kind="update")
    bad.ClearField("after")
    first = uplink(stub, [batch([story[0], bad, story[1]]), batch(story[2:])])
    acks = [a for r in first for a in r.event_acks]
    assert [a.status for a in acks] == [
        S.TRACK_EVENT_STATUS_STORED,
        S.TRACK_EVENT_STATUS_INVALID,
        S.TRACK_EVENT_STATUS_STORED,
        S.TRACK_EVENT_STATUS_STORED,
        S.TRACK_EVENT_STATUS_STORED,
    ]
    assert acks[1].idempotency_key == bad.idempotency_key and "no_after" in acks[1].reason
    stored_ids = [a.stored_id for a in acks if a.status == S.TRACK_EVENT_STATUS_STORED]
    assert stored_ids == sorted(stored_ids) and len(set(stored_ids)) == 4
    # The edge resends (it lost the acks): DUPLICATE, same rows; a crop beside them is
    # classified and acked as before.
    again = uplink(stub, [batch([story[2], story[0]], [crop("c1", RED, 7, A[0] + 10)])])
    assert [(a.status, a.stored_id) for a in again[0].event_acks] == [
        (S.TRACK_EVENT_STATUS_DUPLICATE, stored_ids[2]),
        (S.TRACK_EVENT_STATUS_DUPLICATE, stored_ids[0]),
    ]
    assert again[0].acks[0].status == analytics_pb2.CROP_STATUS_STORED
    reg = colour_server.metrics.registry

    def count(name: str, **labels: str) -> float:
        return sample(reg, f"strata_cloud_track_events_{name}_total", labels) or 0.0

    assert count("received", type="new") == 2 and count("received", type="update") == 1
    assert count("stored", type="line_crossed") == 1
    assert count("duplicate", type="line_crossed") == 1 and count("duplicate", type="new") == 1
    assert count("invalid", type="update", reason="no_after") == 1
    failures = sample(
        reg, "strata_cloud_request_failure_total", {"method": "Uplink", "reason": "event_no_after"}
    )
    assert failures == 1
    assert len(track_query(stub)) == 4
    channel.close()


def test_too_many_events_in_a_batch_are_each_invalid(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    cfg = make_config(model, tmp_path / "e.sqlite", labels, limits={"max_events_per_batch": 2})
    channel, stub = stub_for(start_server(cfg))
    (resp,) = uplink(stub, [batch(door_story()[:3])])
    assert [a.status for a in resp.event_acks] == [S.TRACK_EVENT_STATUS_INVALID] * 3
    assert "too_many_events" in resp.event_acks[0].reason
    (resp,) = uplink(stub, [batch(door_story()[:2])])  # the stream, and the next one, go on
    assert [a.status for a in resp.event_acks] == [S.TRACK_EVENT_STATUS_STORED] * 2
    channel.close()


def test_query_filters_pages_and_carries_the_tracks_verdict(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    car = (1_002_500, 8)
    events = [
        *door_story(),
        track_event(5, track=car, kind="new", label="car", track_sequence=0),
        track_event(6, track=car, kind="dwell_exceeded", zone="shop", dwell_s=9.0, label="car"),
    ]
    # Two looks at the person's track: the later one (blue) is the verdict.
    uplink(
        stub,
        [
            batch(events, [crop("c1", RED, 7, A[0] + 100)]),
            batch([], [crop("c2", BLUE, 7, A[0] + 200)]),
        ],
    )
    k = [ev.idempotency_key for ev in events]

    def keys(**kw: Any) -> list[str]:
        return [s.event.idempotency_key for s in track_query(stub, **kw)]

    assert keys() == k
    assert keys(types=[parse_type("line_crossed")]) == [k[2]]
    assert keys(types=[parse_type("new"), parse_type("end")]) == [k[0], k[3], k[4]]
    assert keys(zone="shop") == [k[1], k[5]]
    assert keys(line="entry") == [k[2]]
    assert keys(rule="shop-entry") == [k[1]]
    assert keys(track_uid=f"{car[0]}-8") == [k[4], k[5]]
    assert keys(track_id=7) == k[:4]
    assert keys(label="car", camera_id="door") == [k[4], k[5]]
    assert keys(camera_id="yard") == []
    assert keys(start_ns=events[1].capture_ns, end_ns=events[3].capture_ns) == k[1:3]
    got = track_query(stub)
    verdicts = {(s.event.track_uid, s.event.verdict.label) for s in got}
    assert verdicts == {(f"{A[0]}-7", "blue"), (f"{car[0]}-8", "")}
    person = got[0].event.verdict
    crops = [
        e
        for p in stub.QueryEvents(
            analytics_pb2.QueryEventsRequest(version=current_version(), track_uid=f"{A[0]}-7"),
            timeout=10,
        )
        for e in p.events
    ]
    assert [e.crop_id for e in crops] == ["c1", "c2"] and person.event_id == crops[1].event_id
    # Pages of 4: each with the next one's token.
    req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=4)
    pages = list(stub.QueryTrackEvents(req, timeout=10))
    assert [len(p.events) for p in pages] == [4, 2] and pages[-1].next_page_token == ""
    resumed = analytics_pb2.QueryEventsRequest(
        version=current_version(), page_size=4, page_token=pages[0].next_page_token
    )
    assert [s.event.idempotency_key for s in next(iter(stub.QueryTrackEvents(resumed))).events] == (
        k[4:]
    )
    for bad in ({"track_uid": "not-a-uid"}, {"page_token": "bm9wZQ=="}):
        with pytest.raises(grpc.RpcError) as info:
            track_query(stub, **bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()


def test_watch_receives_new_events_live_with_its_filter(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    call = stub.WatchTrackEvents(
        analytics_pb2.WatchEventsRequest(
            version=current_version(), camera_id="door", types=[parse_type("line_crossed")]
        ),
        timeout=20,
    )
    got: queue.Queue[events_pb2.StoredTrackEvent] = read_watch(call)
    story = door_story()
    yard = track_event(
        1, camera="yard", kind="line_crossed", line="gate", direction=S.CROSSING_DIRECTION_OUT
    )
    t0 = time.monotonic()
    uplink(stub, [batch([*story, yard])])
    ev = got.get(timeout=10)
    assert time.monotonic() - t0 < 10
    assert ev.event == story[2] and ev.stored_id > 0
    time.sleep(0.3)
    assert got.empty(), "only the door's line crossings"
    call.cancel()
    channel.close()


def test_store_down_acks_retry_then_stores_after(
    colour_model: tuple[Path, Path],
    postgres: TempPostgres,
    pg_url: str,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    cfg = make_config(
        model,
        Path("unused.sqlite"),
        labels,
        store={"url": pg_url, "connect_timeout_s": 2.0},
        batcher={"retry_after_ms": 321},
    )
    server = start_server(cfg)
    channel, stub = stub_for(server)
    story = door_story()
    (resp,) = uplink(stub, [batch(story[:1])])
    assert resp.event_acks[0].status == S.TRACK_EVENT_STATUS_STORED
    postgres.crash()
    try:
        (resp,) = uplink(stub, [batch(story[1:3])])
        assert [a.status for a in resp.event_acks] == [S.TRACK_EVENT_STATUS_RETRY] * 2
        assert all(a.retry_after_ms == 321 for a in resp.event_acks)
        assert "store_error" in resp.event_acks[0].reason
    finally:
        postgres.start_again()
    # Back: the edge resends what got RETRY and it is stored (the pool may need a moment).
    # The pool reconnects with backoff; on a loaded 2-core machine that took over 20 s.
    deadline = time.monotonic() + 60
    while True:
        (resp,) = uplink(stub, [batch(story[1:3])])
        statuses = [a.status for a in resp.event_acks]
        if statuses == [S.TRACK_EVENT_STATUS_STORED] * 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert statuses == [S.TRACK_EVENT_STATUS_STORED] * 2
    retried = sample(
        server.metrics.registry, "strata_cloud_track_events_retry_total", {"type": "line_crossed"}
    )
    assert retried is not None and retried >= 1
    channel.close()


def test_a_full_writer_queue_acks_retry_and_holds_that_cameras_later_events(
    colour_model: tuple[Path, Path], tmp_path: Path
) -> None:
    """At hand-over, without a server: the writer takes one event (max_pending 1, not yet
    started); the rest get RETRY, and the door's event after a RETRY is held back."""
    from strata.cloud.api.batch_acks import BatchAcks
    from strata.cloud.api.drops import Drops
    from strata.cloud.api.service_parts import ServiceParts
    from strata.cloud.api.track_service import TrackEvents
    from strata.cloud.api.watch import WatchHub
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.sqlite import SQLiteStore

    model, labels = colour_model
    cfg = make_config(model, tmp_path / "e.sqlite", labels, store={"max_pending": 1})
    metrics = CloudMetrics()
    store = SQLiteStore(cfg.store, metrics)
    parts = ServiceParts(None, store, WatchHub(metrics, 1, 1), Drops(metrics), None)  # type: ignore[arg-type]
    tracks = TrackEvents(cfg, parts, metrics)
    story = door_story()
    yard = track_event(1, camera="yard", track=(1_000_000, 3))
    sent: queue.Queue[analytics_pb2.UplinkResponse] = queue.Queue()
    released = threading.Event()
    acks = BatchAcks(0, 4, sent.put, released.set)
    tracks.start([story[0], story[1], yard, story[2]], acks)
    assert sent.empty(), "the first event waits for its commit"
    store.start()
    resp = sent.get(timeout=10)
    assert released.is_set()
    got = [(a.status, a.reason.split(":")[0], a.retry_after_ms) for a in resp.event_acks]
    retry = cfg.batcher.retry_after_ms
    assert got == [
        (S.TRACK_EVENT_STATUS_STORED, "", 0),
        (S.TRACK_EVENT_STATUS_RETRY, "store_busy", retry),
        (S.TRACK_EVENT_STATUS_RETRY, "store_busy", retry),
        (S.TRACK_EVENT_STATUS_RETRY, "held", retry),
    ]
    assert (
        sample(metrics.registry, "strata_cloud_track_events_retry_total", {"type": "zone_entered"})
        == 1
    )
    store.close()
