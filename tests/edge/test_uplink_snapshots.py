"""Track snapshots on the edge's uplink (edge/uplink/snapshots.py, stream.py, spool.py)
against the real AnalyticsService on 127.0.0.1: spilled to the spool across a cloud outage
and stored once it returns; dropped before track events when the spool is full, counted;
an INVALID one final, counted, never resent."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.spool import CropSpool
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, common_pb2, events_pb2
from strata.shared.metrics import sample
from uplink_testkit import KilledEdge, clouds, make, wait_for

_CLOUD_TESTS = str(Path(__file__).resolve().parents[1] / "cloud")
if _CLOUD_TESTS not in sys.path:
    sys.path.append(_CLOUD_TESTS)

from cloud_helpers import picture, snapshot, track_event  # noqa: E402
from cloud_models import LABELS, build_colour_classifier  # noqa: E402
from strata.cloud.server import CloudServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cloud(tmp_path: Path, port: int) -> Iterator[Callable[..., CloudServer]]:
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    model = build_colour_classifier(tmp_path / "colour.onnx", size=32)
    yield from clouds(model, labels, tmp_path / "events.sqlite", port)


def snaps_total(m: EdgeMetrics, status: str) -> float:
    return sample(m.registry, "strata_edge_uplink_snapshots_total", {"status": status}) or 0.0


def drops(m: EdgeMetrics, reason: str) -> float:
    return sample(m.registry, "strata_edge_uplink_snapshot_drops_total", {"reason": reason}) or 0.0


def test_an_outage_spills_snapshots_to_the_spool_and_loses_none(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    snaps = [
        snapshot(track=(1_000, k), kind=kind)
        for k in range(1, 7)
        for kind in ("best_crop", "full_frame")
    ]
    up, m = make(port, tmp_path, snapshot_queue=2)
    try:
        up.offer_snapshots(snaps)  # no cloud: two in memory, the rest on disk
        assert m.spool_snapshots._value.get() >= len(snaps) - 2  # type: ignore[attr-defined]
        server = cloud()
        assert wait_for(lambda: snaps_total(m, "stored") == len(snaps))
        assert wait_for(lambda: up.snapshots_waiting == 0)
    finally:
        up.stop()
    assert server.store.count_snapshots() == len(snaps)
    assert snaps_total(m, "offered") == len(snaps) and not drops(m, "uplink_spool_full")


def test_an_invalid_snapshot_is_final_and_counted(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    server = cloud(snapshots={"max_bytes": 4096})
    big = snapshot(track=(1_000, 1), size=(400, 300), jpeg=picture(400, 300))
    assert len(big.jpeg) > 4096
    ok = snapshot(track=(1_000, 2))
    up, m = make(port, tmp_path)
    try:
        up.offer_snapshots([big, ok])
        assert wait_for(lambda: snaps_total(m, "invalid") == 1 and snaps_total(m, "stored") == 1)
        assert wait_for(lambda: up.snapshots_waiting == 0)
        time.sleep(0.3)
    finally:
        up.stop()
    assert snaps_total(m, "sent") == 2, "an INVALID one is never sent again"
    assert drops(m, "snapshot_invalid") == 1
    assert server.store.count_snapshots() == 1


def test_a_full_spool_drops_crops_then_snapshots_never_events(tmp_path: Path) -> None:
    spool = CropSpool(str(tmp_path / "s.sqlite"), 60_000)
    try:
        crops = [analytics_pb2.Crop(crop_id=f"c{i}", image=b"x" * 4000) for i in range(5)]
        assert spool.push(crops) == 0
        snaps = [snapshot(track=(1_000, k), size=(200, 150)) for k in range(10, 30)]
        assert sum(s.ByteSize() for s in snaps) > 60_000
        crops_out, snaps_out = spool.push_snapshots(snaps)
        assert crops_out == 5, "crops make room for snapshots first"
        assert snaps_out > 0 and spool.snapshots == 20 - snaps_out
        assert spool.bytes <= 60_000
        events: list[events_pb2.TrackEvent] = []
        for i in range(1, 40):
            ev = track_event(i, track=(1_000, i % 5 + 1))
            ev.path.points.extend([ev.path.points[0]] * 20)  # some weight
            events.append(ev)
        done = spool.append_events(events)
        assert done.snapshots_dropped > 0 and done.refused == 0
        assert spool.events == len(events) and spool.bytes <= 60_000
        # A snapshot never pushes an event out.
        before = spool.events
        spool.push_snapshots([snapshot(track=(1_000, 99))])
        assert spool.events == before
        left, bad = spool.pop_snapshots(100)
        # The oldest went: what is left is the newest, in order.
        assert not bad and left and left[-1].track_id == 99
        assert [s.track_id for s in left[:-1]] == list(range(30 - len(left) + 1, 30))
    finally:
        spool.close()


class _OldCloud(analytics_pb2_grpc.AnalyticsServicer):  # type: ignore[misc]
    """A cloud of protocol 2.1: acks crops, ignores snapshots (answers minor 1)."""

    def Uplink(self, request_iterator: Any, context: Any) -> Any:
        for batch in request_iterator:
            yield analytics_pb2.UplinkResponse(
                version=common_pb2.ProtocolVersion(major=2, minor=1),
                acks=[
                    analytics_pb2.CropAck(
                        crop_id=c.crop_id, status=analytics_pb2.CROP_STATUS_STORED
                    )
                    for c in batch.crops
                ],
            )


def test_a_cloud_before_2_2_gets_no_snapshot_and_they_do_not_pile_up(
    port: int, tmp_path: Path
) -> None:
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    analytics_pb2_grpc.add_AnalyticsServicer_to_server(_OldCloud(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    up, m = make(port, tmp_path)
    try:
        crop = analytics_pb2.Crop(crop_id="c1", camera_id="door", image=b"x")
        up.offer([crop])
        up.offer_snapshots([snapshot(track=(1_000, 1))])
        assert wait_for(lambda: drops(m, "cloud_too_old") == 1)
        up.offer_snapshots([snapshot(track=(1_000, 2))])  # while it answers: dropped at once
        assert drops(m, "cloud_too_old") == 2 and up.snapshots_waiting == 0
    finally:
        up.stop()
        server.stop(0)


# Before write-through, the snapshots in memory (up to snapshot_queue) died with the edge.
_KILLED = KilledEdge(
    "snapshots",
    step=2,  # a new track's two pictures at a time
    pause_s=0.5,  # the sender tries the dead cloud: some are taken, in flight, requeued
    uplink={"snapshot_queue": 4, "connect_timeout_s": 0.2, "open_s": 0.2},
)


def test_kill_9_of_the_edge_with_snapshots_unacked_loses_none(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    snaps = [
        snapshot(track=(1_000, k), kind=kind)
        for k in range(1, 11)
        for kind in ("best_crop", "full_frame")
    ]
    # The cloud is down: nothing is acked before the kill.
    spool = _KILLED.run(analytics_pb2.CropBatch(snapshots=snaps), tmp_path, port)
    left = CropSpool(str(spool), 10 << 20)
    on_disk = left.snapshots
    left.close()
    assert on_disk == len(snaps), "an offered snapshot was not on disk when the edge died"
    server = cloud()
    up, m = make(port, tmp_path)  # the edge restarts over the same spool
    try:
        assert wait_for(lambda: snaps_total(m, "stored") == len(snaps), 60.0)
        assert wait_for(lambda: up.snapshots_waiting == 0)
        assert wait_for(lambda: m.spool_snapshots._value.get() == 0)  # type: ignore[attr-defined]
    finally:
        up.stop()
    assert server.store.count_snapshots() == len(snaps)
    after = CropSpool(str(spool), 10 << 20)
    try:
        assert after.snapshots == 0, "acked snapshots stay on disk"
    finally:
        after.close()


def test_snapshots_stay_on_disk_until_acked_and_are_sent_once(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    server = cloud()
    snaps = [snapshot(track=(1_000, k)) for k in range(1, 9)]
    up, m = make(port, tmp_path, snapshot_queue=3)
    try:
        up.offer_snapshots(snaps)
        assert wait_for(lambda: snaps_total(m, "stored") == len(snaps))
        assert wait_for(lambda: up.snapshots_waiting == 0)
        time.sleep(0.3)
    finally:
        up.stop()
    assert snaps_total(m, "sent") == len(snaps) and server.store.count_snapshots() == len(snaps)
    spool = CropSpool(str(tmp_path / "spool.sqlite"), 10 << 20)
    try:
        assert spool.snapshots == 0
    finally:
        spool.close()


def test_events_pushing_snapshots_off_the_disk_drop_them_from_memory_too(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    # A small spool, the cloud down: snapshots in memory are on disk too; events that need
    # the room push the oldest out, and those are gone from memory as well (counted once).
    snaps = [snapshot(track=(1_000, k), size=(200, 150)) for k in range(1, 11)]
    up, m = make(port, tmp_path, spool_max_mib=0.06, snapshot_queue=4)
    try:
        up.offer_snapshots(snaps)
        events = []
        for i in range(1, 41):
            ev = track_event(i, track=(1_000, i % 5 + 1))
            ev.path.points.extend([ev.path.points[0]] * 20)
            events.append(ev)
        up.offer_events(events)
        lost = drops(m, "uplink_spool_full") + drops(m, "uplink_spool_full_events")
        assert lost > 0, "the events needed no room: make them heavier"
        # (a batch the sender holds while it finds no cloud is back in a moment)
        assert wait_for(lambda: up.snapshots_waiting == len(snaps) - lost, 5.0)
        server = cloud()
        assert wait_for(lambda: up.snapshots_waiting == 0 and up.events_waiting == 0, 60.0)
    finally:
        up.stop()
    assert server.store.count_snapshots() == len(snaps) - lost
    assert snaps_total(m, "sent") == len(snaps) - lost


def test_a_failed_edges_spooled_snapshots_are_taken_over(
    cloud: Callable[..., CloudServer], port: int, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry, Counter

    snaps = [snapshot(track=(1_000, k)) for k in range(1, 6)]
    dead = tmp_path / "dead" / "spool.sqlite"
    left = CropSpool(str(dead), 10 << 20)
    left.append_snapshots(snaps)
    left.close()  # what a kill -9 leaves: the rows, no lock holder
    server = cloud()
    up, m = make(port, tmp_path)
    try:
        t = up.adopt_spool(
            str(dead), "edge-b", Counter("adopted", "c", registry=CollectorRegistry())
        )
        assert t is not None
        t.join(10)
        assert wait_for(lambda: snaps_total(m, "stored") == len(snaps))
    finally:
        up.stop()
    assert server.store.count_snapshots() == len(snaps)
    again = CropSpool(str(dead), 10 << 20)
    try:
        assert again.snapshots == 0
    finally:
        again.close()
