"""Track events on the edge's durable uplink (edge/uplink/stream.py, spool.py), against the
real AnalyticsService on 127.0.0.1 with a real SQLite store: stored once each, in order per
camera, across a cloud outage, an edge restart, a takeover and a full spool; INVALID final.
Events come from the real rules engine (edge/rules/engine.py) on scripted tracks."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter
from strata.edge.metrics import EdgeMetrics
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.frame import TrackFrame
from strata.edge.uplink.breaker import BreakerState
from strata.edge.uplink.spool import CropSpool
from strata.shared.config import validate_model
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import (
    analytics_pb2,
    analytics_pb2_grpc,
    common_pb2,
    current_version,
    events_pb2,
)
from strata.shared.metrics import sample
from uplink_testkit import KilledEdge, clouds, held_for, make, wait_for

# The cloud tests' classifier and config builders (tests/ has no packages; tools' conftest
# joins these folders the same way).
_CLOUD_TESTS = str(Path(__file__).resolve().parents[1] / "cloud")
if _CLOUD_TESTS not in sys.path:
    sys.path.append(_CLOUD_TESTS)

from cloud_helpers import jpeg  # noqa: E402
from cloud_models import LABELS, build_colour_classifier  # noqa: E402
from strata.cloud.server import CloudServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

NS = 1_000_000_000
S = events_pb2
RULES = validate_model(
    RulesConfig,
    {
        "cameras": {
            cam: {
                "lines": [
                    {
                        "name": "door",
                        "points": [[0.0, 0.5], [1.0, 0.5]],
                        "in_side": "right",
                        "debounce_s": 0,
                    }
                ]
            }
            for cam in ("door", "yard")
        }
    },
)


def _frame(
    camera: str, t_s: float, track: int | None, y: float, ended: tuple[int, ...] = ()
) -> Any:
    ids = [] if track is None else [track]
    n = len(ids)
    return TrackFrame(
        camera_id=camera,
        capture_ns=round(t_s * NS),
        frame_size=(1000, 1000),
        track_ids=np.array(ids, np.uint64),
        boxes=np.array([[180.0, y - 80, 220.0, y]] * n, np.float64).reshape(-1, 4),
        scores=np.full(n, 0.9),
        class_ids=np.zeros(n, np.int64),
        confirmed=np.ones(n, bool),
        observed=np.ones(n, bool),
        labels=("person", "car"),
        ended=ended,
    )


def walks(cameras: tuple[str, ...], tracks: int, first: int = 1) -> list[events_pb2.TrackEvent]:
    """Each camera's tracks walking down across the line one after another, each ended:
    new, line_crossed, end per track, the cameras' frames interleaved as an edge serves them."""
    engine = RulesEngine(RULES, "edge-a", wall_ns=lambda: 1_000 * NS)
    out: list[events_pb2.TrackEvent] = []
    for k in range(first, first + tracks):
        t0 = 10.0 + 3 * k
        for i in range(6):
            for cam in cameras:
                out += engine.process(_frame(cam, t0 + 0.2 * i, k, 300.0 + 80 * i))
        for cam in cameras:
            out += engine.process(_frame(cam, t0 + 1.4, None, 0.0, ended=(k,)))
    return out


# -- the cloud ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("models")
    labels = d / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    return build_colour_classifier(d / "colour.onnx", size=32), labels


@pytest.fixture
def cloud(
    classifier: tuple[Path, Path], tmp_path: Path, port: int
) -> Iterator[Callable[[], CloudServer]]:
    """Starts the real cloud service on `port` over one SQLite store (again after a stop)."""
    model, labels = classifier
    yield from clouds(model, labels, tmp_path / "events.sqlite", port)


def stored(server: CloudServer) -> list[events_pb2.StoredTrackEvent]:
    """Every stored track event, through QueryTrackEvents, in commit order (stored_id)."""
    channel = grpc.insecure_channel(server.address)
    try:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        req = analytics_pb2.QueryEventsRequest(version=current_version(), page_size=1000)
        got = [ev for page in stub.QueryTrackEvents(req, timeout=10) for ev in page.events]
    finally:
        channel.close()
    return sorted(got, key=lambda s: s.stored_id)


def cloud_count(server: CloudServer, name: str, **labels: str) -> float:
    return sample(server.metrics.registry, f"strata_cloud_track_events_{name}_total", labels) or 0


def events_total(m: EdgeMetrics, status: str) -> float:
    return sample(m.registry, "strata_edge_uplink_events_total", {"status": status}) or 0.0


def keys(events: list[events_pb2.TrackEvent]) -> list[str]:
    return [e.idempotency_key for e in events]


def assert_in_order_once(
    got: list[events_pb2.StoredTrackEvent], want: list[events_pb2.TrackEvent]
) -> None:
    """Each wanted key stored exactly once, and each camera's in its sequence order in the
    store's commit order (not just in the query's capture-time order)."""
    got_keys = [s.event.idempotency_key for s in got]
    assert sorted(got_keys) == sorted(keys(want))
    assert len(set(got_keys)) == len(got_keys)
    for cam in {e.camera_id for e in want}:
        seqs = [s.event.sequence for s in got if s.event.camera_id == cam]
        assert seqs == sorted(seqs), cam
        assert seqs == [e.sequence for e in want if e.camera_id == cam]


# -- tests -------------------------------------------------------------------------------


def test_events_are_stored_once_each_in_order_per_camera(
    cloud: Callable[[], CloudServer], port: int
) -> None:
    server = cloud()
    story = walks(("door", "yard"), tracks=12)
    assert {e.type for e in story} == {
        S.TRACK_EVENT_TYPE_NEW,
        S.TRACK_EVENT_TYPE_LINE_CROSSED,
        S.TRACK_EVENT_TYPE_END,
    }
    up, m = make(port, streams=2)
    try:
        for i in range(0, len(story), 5):  # as the rules stage hands them over, frame by frame
            up.offer_events(story[i : i + 5])
        assert wait_for(lambda: events_total(m, "stored") == len(story))
        assert wait_for(lambda: up.events_waiting == 0)
    finally:
        up.stop()
    assert_in_order_once(stored(server), story)
    assert events_total(m, "offered") == len(story)
    assert events_total(m, "duplicate") == 0 and events_total(m, "invalid") == 0
    assert cloud_count(server, "stored", type="end") == 12 * 2


def test_a_cloud_outage_and_an_edge_restart_lose_no_event(
    cloud: Callable[[], CloudServer], port: int, tmp_path: Path
) -> None:
    story = walks(("door", "yard"), tracks=40)  # 240 events; memory holds 8
    half = len(story) // 2
    up, m = make(port, tmp_path, queue=8, ack_timeout_s=2.0)
    for i in range(0, half, 6):  # no cloud listening: they wait, most of them on disk
        up.offer_events(story[i : min(i + 6, half)])
        time.sleep(0.01)
    assert wait_for(lambda: sample(m.registry, "strata_edge_breaker_state") == 2)
    assert up.events_spooled > 0
    assert sample(m.registry, "strata_edge_uplink_spool_events") == up.events_spooled
    up.stop()  # the edge restarts mid-outage: memory goes to the spool file
    on_disk = CropSpool(str(tmp_path / "spool.sqlite"), 10 << 20)
    assert on_disk.events == half
    on_disk.close()
    up2, m2 = make(port, tmp_path, queue=8, ack_timeout_s=2.0)
    try:
        up2.offer_events(story[half:])
        time.sleep(1.0)
        server = cloud()  # the cloud comes up
        assert wait_for(lambda: up2.events_waiting == 0, 60.0)
        # The same events again (an edge replaying after kill -9): DUPLICATE, stored once.
        up2.offer_events(story[:10])
        assert wait_for(lambda: events_total(m2, "duplicate") == 10)
        assert wait_for(lambda: up2.events_waiting == 0)
    finally:
        up2.stop()
    assert_in_order_once(stored(server), story)
    assert events_total(m2, "stored") == len(story)
    assert (
        cloud_count(server, "duplicate", type="new")
        + cloud_count(server, "duplicate", type="line_crossed")
        + cloud_count(server, "duplicate", type="end")
        == 10
    )
    assert events_total(m, "spooled") >= half
    for metrics in (m, m2):
        assert sample(metrics.registry, "strata_edge_uplink_event_drops_total") == 0


def test_an_invalid_event_is_counted_not_retried_and_blocks_nothing(
    cloud: Callable[[], CloudServer], port: int
) -> None:
    server = cloud()
    story = walks(("door",), tracks=4)
    bad = story[4]
    bad.ClearField("after")  # the cloud requires it: INVALID, final
    up, m = make(port, batch=2)
    try:
        up.offer_events(story)
        good = [e for e in story if e is not bad]
        assert wait_for(lambda: events_total(m, "stored") == len(good))
        assert wait_for(lambda: up.events_waiting == 0)
        time.sleep(0.5)  # a resend would show now
    finally:
        up.stop()
    assert_in_order_once(stored(server), good)
    assert events_total(m, "invalid") == 1 and events_total(m, "retry") == 0
    assert sample(m.registry, "strata_edge_uplink_event_drops_total", {"reason": "event_invalid"})
    assert cloud_count(server, "received", type=_type_name(bad)) == sum(
        1 for e in story if e.type == bad.type
    )  # the bad one reached the cloud once: never resent
    assert cloud_count(server, "invalid", type=_type_name(bad), reason="no_after") == 1


def _type_name(ev: events_pb2.TrackEvent) -> str:
    return S.TrackEventType.Name(ev.type).removeprefix("TRACK_EVENT_TYPE_").lower()


def _crop(i: int, size: int = 48) -> analytics_pb2.Crop:
    return analytics_pb2.Crop(
        crop_id=f"c{i:05d}",
        edge_id="edge-a",
        camera_id="door",
        sequence=i + 1,
        detection=common_pb2.Detection(score=0.7, class_id=0, label="person"),
        encoding=common_pb2.ENCODING_JPEG,
        image=jpeg((0, 0, 255), w=size, h=size),
        width=size,
        height=size,
        timing=common_pb2.Timing(capture_ns=1_000 + i),
    )


def test_a_full_spool_drops_crops_before_events(
    cloud: Callable[[], CloudServer], port: int, tmp_path: Path
) -> None:
    crops = [_crop(i) for i in range(30)]
    story = walks(("door", "yard"), tracks=10)
    crop_bytes = sum(c.ByteSize() for c in crops)
    event_bytes = sum(e.ByteSize() for e in story)
    # Room for every event and a few crops, not for all of both.
    bound = event_bytes + crop_bytes // 3
    up, m = make(port, tmp_path, queue=4, spool_max_mib=bound / 2**20)
    try:
        up.offer(crops)  # no cloud: 4 in memory, the rest on disk
        assert wait_for(lambda: up.breaker.state is BreakerState.OPEN)
        up.offer_events(story)  # crops make room
        assert wait_for(lambda: up.events_buffered == len(story), 5.0)

        def crop_drops(reason: str) -> float:
            return sample(m.registry, "strata_edge_drops_total", {"reason": reason}) or 0.0

        assert crop_drops("uplink_spool_full_events") > 0
        assert sample(m.registry, "strata_edge_uplink_event_drops_total") == 0
        server = cloud()
        assert wait_for(lambda: up.events_waiting == 0 and up.waiting == 0, 60.0)
        assert_in_order_once(stored(server), story)
        assert events_total(m, "stored") == len(story)
        # Every crop stored or counted: the ones that made room for events apart.
        stored_crops = sample(m.registry, "strata_edge_crops_total", {"status": "stored"})
        dropped = crop_drops("uplink_spool_full_events") + crop_drops("uplink_spool_full")
        assert stored_crops is not None and stored_crops + dropped == len(crops)
        assert sample(m.registry, "strata_edge_uplink_event_drops_total") == 0
    finally:
        up.stop()


def test_the_spool_keeps_events_until_final_and_gives_crops_up_first(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)  # a spool from before events: crops only
    conn.execute("CREATE TABLE crops (seq INTEGER PRIMARY KEY, size INTEGER, data BLOB)")
    conn.commit()
    conn.close()
    story = walks(("door",), tracks=3)
    bound = sum(e.ByteSize() for e in story) - 1  # not all of them fit
    spool = CropSpool(str(path), max_bytes=bound)
    assert spool.push([_crop(i) for i in range(2)]) == 0
    first = spool.append_events(story[:5])
    assert len(first.rows) == 5 and first.refused == 0 and spool.events == 5
    loaded, bad = spool.load_events(-1, 2)  # read, not removed: a kill loses none
    assert [e.idempotency_key for _, e in loaded] == keys(story[:2]) and bad == 0
    assert spool.events == 5
    spool.delete_events([row for row, _ in loaded])  # their acks were final
    assert spool.events == 3
    spool.delete_events([row for row, _ in loaded])  # again: nothing there, nothing counted
    assert spool.events == 3
    # Past the bound: both crops go before any event; then the newest events are refused.
    rest = spool.append_events(story[5:])
    assert first.crops_dropped + rest.crops_dropped == 2 and len(spool) == 0
    assert rest.refused == 0 and spool.events == len(story) - 2
    more = spool.append_events(story[:3])  # no crop left to drop: refused, counted
    assert more.refused >= 1 and more.rows == tuple(range(more.rows[0], more.rows[-1] + 1))
    assert spool.bytes <= bound
    assert spool.push([_crop(9)]) == 1  # a crop never pushes an event out
    kept = spool.events
    spool.close()
    again = CropSpool(str(path), max_bytes=bound)
    got, bad = again.load_events(-1, 100)
    want = keys(story[2:]) + keys(story[: 3 - more.refused])
    assert [e.idempotency_key for _, e in got] == want and bad == 0 and len(got) == kept
    again.close()


def test_a_failed_edges_spooled_events_are_taken_over(
    cloud: Callable[[], CloudServer], port: int, tmp_path: Path
) -> None:
    story = walks(("door", "yard"), tracks=5)
    dead = tmp_path / "dead" / "spool.sqlite"
    left = CropSpool(str(dead), 10 << 20)
    left.append_events(story)
    left.close()  # what a kill -9 leaves: the rows, no lock holder
    server = cloud()
    up, m = make(port, tmp_path)
    adopted = Counter("adopted", "crops", registry=CollectorRegistry())
    try:
        t = up.adopt_spool(str(dead), "edge-b", adopted)
        assert t is not None
        t.join(10)
        assert events_total(m, "adopted") == len(story)
        assert wait_for(lambda: events_total(m, "stored") == len(story))
    finally:
        up.stop()
    assert_in_order_once(stored(server), story)
    again = CropSpool(str(dead), 10 << 20)
    assert again.events == 0
    again.close()


class RetryOnce(analytics_pb2_grpc.AnalyticsServicer):
    """A cloud that answers RETRY to one event once (and `held` RETRY to that camera's later
    events in the batch, as the real one does), and stores the rest in arrival order."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.order: list[str] = []
        self.retried = False
        self.lock = threading.Lock()

    def Uplink(
        self, request_iterator: Iterator[analytics_pb2.CropBatch], context: Any
    ) -> Iterator[analytics_pb2.UplinkResponse]:
        for batch in request_iterator:
            acks = []
            held: set[str] = set()
            with self.lock:
                for ev in batch.events:
                    k = ev.idempotency_key
                    if ev.camera_id in held or (k == self.key and not self.retried):
                        self.retried = True
                        held.add(ev.camera_id)
                        status, after = S.TRACK_EVENT_STATUS_RETRY, 300
                    elif k in self.order:
                        status, after = S.TRACK_EVENT_STATUS_DUPLICATE, 0
                    else:
                        self.order.append(k)
                        status, after = S.TRACK_EVENT_STATUS_STORED, 0
                    acks.append(
                        S.TrackEventAck(idempotency_key=k, status=status, retry_after_ms=after)
                    )
            yield analytics_pb2.UplinkResponse(version=current_version(), event_acks=acks)


def test_a_retry_holds_that_cameras_later_events_and_no_other(port: int) -> None:
    story = walks(("door", "yard"), tracks=6)
    door = [e for e in story if e.camera_id == "door"]
    fake = RetryOnce(door[3].idempotency_key)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analytics_pb2_grpc.add_AnalyticsServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    up, m = make(port, batch=2, streams=2)
    try:
        for i in range(0, len(story), 4):
            up.offer_events(story[i : i + 4])
            time.sleep(0.02)
        assert wait_for(lambda: len(fake.order) == len(story))
    finally:
        up.stop()
        server.stop(0)
    assert fake.retried and events_total(m, "retry") >= 1
    for cam in ("door", "yard"):
        want = [e.idempotency_key for e in story if e.camera_id == cam]
        assert [k for k in fake.order if k.startswith(f"{cam}/")] == want
    # The yard went on while the door waited 300 ms: some of its events were stored later
    # than the door's retried one was first refused, and before it was stored.
    pos = fake.order.index(door[3].idempotency_key)
    assert any(k.startswith("yard/") for k in fake.order[pos - 3 : pos]) or any(
        k.startswith("yard/") for k in fake.order[:pos]
    )


class OldCloud(analytics_pb2_grpc.AnalyticsServicer):
    """A cloud of protocol 2.0: stores crops, ignores track events (answers minor 0)."""

    def __init__(self) -> None:
        self.crops: list[str] = []

    def Uplink(
        self, request_iterator: Iterator[analytics_pb2.CropBatch], context: Any
    ) -> Iterator[analytics_pb2.UplinkResponse]:
        for batch in request_iterator:
            if not batch.crops:
                continue  # as a 2.0 cloud: nothing to answer
            self.crops += [c.crop_id for c in batch.crops]
            yield analytics_pb2.UplinkResponse(
                version=common_pb2.ProtocolVersion(major=2, minor=0),
                acks=[
                    analytics_pb2.CropAck(
                        crop_id=c.crop_id, status=analytics_pb2.CROP_STATUS_STORED
                    )
                    for c in batch.crops
                ],
            )


def test_events_wait_for_a_cloud_that_acks_them(
    cloud: Callable[[], CloudServer], port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strata.edge.uplink.events as stream_module

    monkeypatch.setattr(stream_module, "OLD_CLOUD_PAUSE_S", 1.0)
    old = OldCloud()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analytics_pb2_grpc.add_AnalyticsServicer_to_server(old, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    story = walks(("door",), tracks=3)
    up, m = make(port, batch=2)
    try:
        up.offer([_crop(i) for i in range(6)])
        up.offer_events(story)
        assert wait_for(lambda: len(set(old.crops)) == 6)
        time.sleep(0.5)
        assert up.events_waiting == len(story) and events_total(m, "stored") == 0
        assert sample(m.registry, "strata_edge_uplink_event_drops_total") == 0
        server.stop(0)
        new = cloud()  # the cloud is upgraded: the events go now
        assert wait_for(lambda: events_total(m, "stored") == len(story))
    finally:
        up.stop()
    assert_in_order_once(stored(new), story)


# The edge dies the moment the last offer returns (no stop, nothing flushed).
_KILLED = KilledEdge(
    "events",
    step=3,  # as fast as a busy rules stage: the kill finds events unsent, in flight and acked
    pause_s=0.0,
    uplink={"queue": 8, "connect_timeout_s": 0.2, "streams": 2},
)


def test_kill_9_of_the_edge_mid_flow_loses_no_event(
    cloud: Callable[[], CloudServer], port: int, tmp_path: Path
) -> None:
    server = cloud()
    story = walks(("door", "yard"), tracks=30)
    spool = _KILLED.run(analytics_pb2.CropBatch(events=story), tmp_path, port)
    before = held_for(lambda: len(stored(server)))
    left = CropSpool(str(spool), 10 << 20)
    on_disk = left.events
    left.close()
    # Whatever the cloud had not acked final is still on disk (some it stored: resent).
    assert on_disk >= len(story) - before and on_disk > 0
    up, m = make(port, tmp_path)  # the edge restarts over the same spool
    try:
        assert wait_for(lambda: up.events_waiting == 0, 60.0)
    finally:
        up.stop()
    assert_in_order_once(stored(server), story)
    # The copies of events stored before the kill were acked DUPLICATE, nothing else.
    assert events_total(m, "stored") + events_total(m, "duplicate") == on_disk
    assert events_total(m, "stored") == len(story) - before
