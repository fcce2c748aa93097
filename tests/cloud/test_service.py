"""A real server on 127.0.0.1 with a real SQLite file: uplink, query, restart, classify."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from cloud_helpers import jpeg, make_config, read_watch, stub_for
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import (
    PROTOCOL_MAJOR,
    analytics_pb2,
    common_pb2,
    current_version,
    events_pb2,
)
from strata.shared.metrics import sample

RED, GREEN, BLUE = (0, 0, 255), (0, 255, 0), (255, 0, 0)  # BGR


def crop(i: int, bgr: tuple[int, int, int], camera: str = "cam-1", edge: str = "edge-a"):
    return analytics_pb2.Crop(
        crop_id=f"c{i}",
        edge_id=edge,
        camera_id=camera,
        sequence=i,
        detection=common_pb2.Detection(
            box=common_pb2.Box(x1=1, y1=2, x2=30, y2=40), score=0.7, class_id=0, label="person"
        ),
        encoding=common_pb2.ENCODING_JPEG,
        image=jpeg(bgr),
        timing=common_pb2.Timing(capture_ns=1_000_000_000 + i * 1000),
    )


def uplink(
    stub, batches: list[analytics_pb2.CropBatch], timeout: float = 30
) -> list[analytics_pb2.CropAck]:
    acks: list[analytics_pb2.CropAck] = []
    for resp in stub.Uplink(iter(batches), timeout=timeout):
        assert resp.version.major == PROTOCOL_MAJOR
        acks.extend(resp.acks)
    return acks


def query(stub, **kw) -> list[analytics_pb2.Event]:
    req = analytics_pb2.QueryEventsRequest(version=current_version(), **kw)
    return [ev for page in stub.QueryEvents(req, timeout=10) for ev in page.events]


def test_uplink_is_stored_queried_and_survives_restart(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    cfg = make_config(model, tmp_path / "events.sqlite", labels)
    server = start_server(cfg)
    channel, stub = stub_for(server)
    colours = [RED, GREEN, BLUE]
    batches = [
        analytics_pb2.CropBatch(
            version=current_version(),
            crops=[crop(b * 4 + j, colours[(b * 4 + j) % 3]) for j in range(4)],
        )
        for b in range(3)
    ]
    acks = uplink(stub, batches)
    assert sorted(a.crop_id for a in acks) == sorted(f"c{i}" for i in range(12))
    assert all(a.status == analytics_pb2.CROP_STATUS_STORED for a in acks)
    assert len({a.event_id for a in acks}) == 12
    by_crop = {a.crop_id: a for a in acks}
    assert by_crop["c0"].labels[0].label == "red"
    assert by_crop["c1"].labels[0].label == "green"
    assert by_crop["c2"].labels[0].label == "blue"
    assert sample(server.metrics.registry, "strata_cloud_events_stored_total") == 12
    assert sample(server.metrics.registry, "strata_cloud_batch_size_count") >= 1

    events = query(stub, camera_id="cam-1")
    assert [e.crop_id for e in events] == [f"c{i}" for i in range(12)]  # capture time order
    assert events[0].edge_detection.label == "person"
    assert events[0].edge_detection.box.x2 == 30
    # The classifier's top label is evidence; the object's label is the detector's, and
    # label filters match it (issue 38). The colour model's labels have no verdict map: each
    # stands for itself, so it abstains on "person".
    assert [e.label for e in events[:3]] == ["red", "green", "blue"]
    assert all(e.verdict == events_pb2.VERDICT_ABSTAIN and e.model for e in events)
    assert len(query(stub, camera_id="cam-1", label="person")) == 12
    assert query(stub, camera_id="cam-1", label="green") == []
    assert query(stub, camera_id="cam-2") == []
    window = query(stub, start_ns=1_000_000_000 + 3000, end_ns=1_000_000_000 + 6000)
    assert [e.crop_id for e in window] == ["c3", "c4", "c5"]

    # Pagination: pages of 5, each with the token of the next.
    req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=5)
    pages = list(stub.QueryEvents(req, timeout=10))
    assert [len(p.events) for p in pages] == [5, 5, 2]
    assert pages[-1].next_page_token == ""
    resumed = analytics_pb2.QueryEventsRequest(
        version=current_version(), page_size=5, page_token=pages[0].next_page_token
    )
    first = next(iter(stub.QueryEvents(resumed, timeout=10)))
    assert [e.crop_id for e in first.events] == [f"c{i}" for i in range(5, 10)]
    channel.close()
    server.stop(0.5)

    # A new server on the same file has the same events; a resent crop is stored once.
    server2 = start_server(cfg)
    channel, stub = stub_for(server2)
    assert [e.event_id for e in query(stub)] == [by_crop[f"c{i}"].event_id for i in range(12)]
    again = uplink(stub, [analytics_pb2.CropBatch(version=current_version(), crops=[crop(3, RED)])])
    assert again[0].status == analytics_pb2.CROP_STATUS_STORED
    assert again[0].event_id == by_crop["c3"].event_id
    assert len(query(stub)) == 12
    assert sample(server2.metrics.registry, "strata_cloud_crops_duplicate_total") == 1
    channel.close()


def test_same_crop_twice_in_one_batch_is_stored_once(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    batch = analytics_pb2.CropBatch(version=current_version(), crops=[crop(7, RED)] * 3)
    acks = uplink(stub, [batch])
    assert len(acks) == 3
    assert {a.event_id for a in acks} == {acks[0].event_id}
    assert len(query(stub)) == 1
    channel.close()


def test_track_ids_are_stored_and_queries_group_by_track(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    crops = [crop(i, RED) for i in range(5)]
    for i, c in enumerate(crops):
        # Crops 0, 2, 4 are one object (track 9); 1 carries its id on the detection only;
        # 3 is untracked.
        if i % 2 == 0:
            c.track_id = 9
        elif i == 1:
            c.detection.track_id = 5
    uplink(stub, [analytics_pb2.CropBatch(version=current_version(), crops=crops)])
    flat = query(stub)
    assert [(e.crop_id, e.track_id) for e in flat] == [
        ("c0", 9),
        ("c1", 5),
        ("c2", 9),
        ("c3", 0),
        ("c4", 9),
    ]
    grouped = query(stub, group_by_track=True, page_size=1)
    assert [(e.crop_id, e.track_id, e.track_events) for e in grouped] == [
        ("c1", 5, 1),
        ("c3", 0, 0),
        ("c4", 9, 3),
    ]
    channel.close()


def test_classify_returns_labels(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    for bgr, want in ((RED, "red"), (GREEN, "green"), (BLUE, "blue")):
        resp = stub.Classify(
            analytics_pb2.ClassifyRequest(
                version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=jpeg(bgr)
            ),
            timeout=10,
        )
        assert resp.labels[0].label == want
        assert resp.model == "colour"
        assert len(resp.labels) == 3
        assert abs(sum(ls.score for ls in resp.labels) - 1.0) < 1e-4
    raw = bytes(bytearray([0, 255, 0] * 20 * 10))
    resp = stub.Classify(
        analytics_pb2.ClassifyRequest(
            version=current_version(),
            encoding=common_pb2.ENCODING_BGR,
            width=20,
            height=10,
            image=raw,
            top_k=1,
        ),
        timeout=10,
    )
    assert [ls.label for ls in resp.labels] == ["green"]
    assert (
        sample(
            colour_server.metrics.registry,
            "strata_cloud_request_success_total",
            {"method": "Classify"},
        )
        == 4
    )
    channel.close()


def test_watch_events_sees_new_events(colour_server: CloudServer) -> None:
    channel, stub = stub_for(colour_server)
    call = stub.WatchEvents(
        analytics_pb2.WatchEventsRequest(version=current_version(), camera_id="cam-9"),
        timeout=20,
    )
    got: queue.Queue[analytics_pb2.Event] = read_watch(call)
    uplink(
        stub,
        [
            analytics_pb2.CropBatch(
                version=current_version(),
                crops=[crop(1, RED, camera="cam-8"), crop(2, BLUE, camera="cam-9")],
            )
        ],
    )
    ev = got.get(timeout=10)
    assert (ev.crop_id, ev.label, ev.camera_id) == ("c2", "blue", "cam-9")
    assert ev.event_id > 0
    call.cancel()
    channel.close()


def test_health_and_reflection_answer(colour_server: CloudServer) -> None:
    channel = grpc.insecure_channel(colour_server.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "strata.v1.Analytics"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)

    def ask(
        req: reflection_pb2.ServerReflectionRequest,
    ) -> Iterator[reflection_pb2.ServerReflectionResponse]:
        return refl.ServerReflectionInfo(iter([req]), timeout=5)

    names = {
        s.name
        for r in ask(reflection_pb2.ServerReflectionRequest(list_services=""))
        for s in r.list_services_response.service
    }
    assert {"strata.v1.Analytics", "grpc.health.v1.Health"} <= names
    files = [
        r.file_descriptor_response
        for r in ask(
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="strata.v1.Analytics")
        )
    ]
    assert files and files[0].file_descriptor_proto
    channel.close()


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "10.1.2.3:0"])
def test_plaintext_refuses_non_loopback(
    colour_model: tuple[Path, Path], tmp_path: Path, listen: str
) -> None:
    from strata.cloud.security import SecurityError

    model, labels = colour_model
    with pytest.raises(SecurityError, match="refusing to serve plaintext"):
        CloudServer(make_config(model, tmp_path / "e.sqlite", labels, listen=listen))


def test_one_batcher_batches_classify_and_uplink_together(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    server = start_server(
        make_config(
            model,
            tmp_path / "e.sqlite",
            labels,
            # The fixed delay gathers both callers' requests; adaptive close would send the
            # Classify request alone when it arrives before the uplink's crops.
            batcher={"max_batch": 4, "max_queue_delay_ms": 1000, "adaptive_close": False},
        )
    )
    channel, stub = stub_for(server)
    fut = stub.Classify.future(
        analytics_pb2.ClassifyRequest(
            version=current_version(), encoding=common_pb2.ENCODING_JPEG, image=jpeg(RED)
        ),
        timeout=10,
    )
    batch = analytics_pb2.CropBatch(
        version=current_version(), crops=[crop(i, GREEN) for i in range(9)]
    )
    acks = uplink(stub, [batch])
    assert fut.result().labels[0].label == "red"
    assert len(acks) == 9 and all(a.labels[0].label == "green" for a in acks)
    reg = server.metrics.registry
    # 10 requests, at most 4 a batch: 3 batches, the Classify call among the uplinked crops.
    assert sample(reg, "strata_cloud_batch_size_sum") == 10
    assert sample(reg, "strata_cloud_inference_exec_count_total") == 3
    assert sample(reg, "strata_cloud_batch_size_bucket", {"le": "4.0"}) == 3
    channel.close()


def test_stop_ends_watchers_and_keeps_acked_events(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    from strata.cloud.metrics import CloudMetrics
    from strata.cloud.store.registry import EventQuery, open_store

    model, labels = colour_model
    cfg = make_config(model, tmp_path / "e.sqlite", labels)
    server = start_server(cfg)
    channel, stub = stub_for(server)
    watch = stub.WatchEvents(
        analytics_pb2.WatchEventsRequest(version=current_version()), timeout=30
    )
    watch.initial_metadata()
    acks = uplink(
        stub,
        [
            analytics_pb2.CropBatch(
                version=current_version(), crops=[crop(i, BLUE) for i in range(5)]
            )
        ],
    )
    assert len(acks) == 5
    seen = [next(watch).crop_id for _ in range(5)]
    assert sorted(seen) == [f"c{i}" for i in range(5)]
    server.stop(5.0)  # returns as soon as the watch handler has ended
    with pytest.raises(StopIteration):
        next(watch)  # the stream ends cleanly when the server stops
    channel.close()
    store = open_store(cfg.store, CloudMetrics())
    events, _ = store.query(EventQuery(), None, 100)
    assert {e.event_id for e in events} == {a.event_id for a in acks}
    store.close()
