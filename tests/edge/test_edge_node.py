"""Integration: real DEALER agents and a real edge node over loopback ZeroMQ."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_testkit import (
    MODEL_SIZE,
    Listener,
    RawAgent,
    deliver,
    receipts,
    wait_until_subscribed,
)
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import PROTOCOL_MAJOR, common_pb2, frame_pb2
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)


def make_cfg(**over: Any) -> EdgeConfig:
    base: dict[str, Any] = {
        "listen": "tcp://127.0.0.1:0",
        "publish": "tcp://127.0.0.1:0",
        "model": {"input_size": MODEL_SIZE},
        # Queues deep enough that a test's burst is never shed (the overload test says less).
        "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "queue_per_camera": 64},
    }
    for k, v in over.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and k in base else v
    return EdgeConfig.model_validate(base)


@pytest.fixture
def node_factory(colour_model: Path) -> Iterator[Any]:
    nodes: list[EdgeNode] = []

    def make(**over: Any) -> EdgeNode:
        node = build_node(make_cfg(**over), colour_model, "colour")
        node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.stop()


def wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)


def _overlaps(clip: SyntheticClip, index: int) -> bool:
    b = clip.boxes(index)
    for i in range(len(b)):
        for j in range(i + 1, len(b)):
            if b[i].x1 < b[j].x2 and b[j].x1 < b[i].x2 and b[i].y1 < b[j].y2 and b[j].y1 < b[i].y2:
                return True
    return False


@pytest.mark.parametrize(
    ("encoding", "prep_threads"),
    [(common_pb2.ENCODING_BGR, 1), (common_pb2.ENCODING_JPEG, 1), (common_pb2.ENCODING_BGR, 3)],
)
def test_detections_match_ground_truth_in_original_pixels(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip, encoding: int, prep_threads: int
) -> None:
    # A delay target long enough that the whole burst fits the credits (no BUSY here).
    node = node_factory(
        runtime={"preprocess_threads": prep_threads},
        batching={"delay_target_ms": 60_000},
        flow={"initial_credits": 64},
    )
    sub = Listener(zctx, node.endpoints.publish)
    agents = [RawAgent(zctx, node.endpoints.listen, f"agent-{i}") for i in range(2)]
    wait_until_subscribed(agents[0], sub, synthetic_clip.frame(0).image)
    reg = node.metrics.registry
    base = sample(reg, "strata_edge_frames_processed_total")
    frames = [i for i in range(len(synthetic_clip)) if not _overlaps(synthetic_clip, i)]
    sent = 0
    for n, idx in enumerate(frames):
        cam = f"cam{n % 2}"
        agents[n % 2].send_image(
            cam, n // 2 + 1, synthetic_clip.frame(idx).image, encoding, frame_index=idx
        )
        sent += 1
    results = sub.collect(sent)
    # Each frame: QUEUED on receipt, then PROCESSED once its result is published.
    acks = agents[0].acks(2 * (sent - sent // 2)) + agents[1].acks(2 * (sent // 2))
    by_frame: dict[tuple[str, int], list[int]] = {}
    for a in acks:
        by_frame.setdefault((a.camera_id, a.sequence), []).append(a.status)
    assert len(by_frame) == sent
    assert all(
        v == [frame_pb2.ACK_STATUS_QUEUED, frame_pb2.ACK_STATUS_PROCESSED]
        for v in by_frame.values()
    )
    assert all(a.credits >= 1 and a.session_id == 7 for a in acks)
    assert len(results) == sent
    tol = 3.0 if encoding == common_pb2.ENCODING_JPEG else 2.0
    matched = 0
    for msg in results:
        truth = synthetic_clip.boxes(msg.frame_index)
        assert (msg.width, msg.height) == (synthetic_clip.width, synthetic_clip.height)
        assert len(msg.detections) == len(truth), msg.frame_index
        by_label = {d.label: d for d in msg.detections}
        for t in truth:
            d = by_label[t.label]
            got = np.array([d.box.x1, d.box.y1, d.box.x2, d.box.y2])
            np.testing.assert_allclose(got, [t.x1, t.y1, t.x2, t.y2], atol=tol)
            assert d.class_id == t.class_id
            matched += 1
        tm = msg.timing
        assert 0 < tm.capture_ns <= tm.edge_receive_ns <= tm.inference_start_ns
        assert tm.inference_start_ns <= tm.inference_end_ns <= tm.edge_send_ns
    assert matched > 20
    # The counter moves right after the send; give the worker that moment.
    wait_for(lambda: sample(reg, "strata_edge_frames_processed_total") == base + sent)
    assert sample(reg, "strata_edge_frames_processed_total") == base + sent
    assert sample(reg, "strata_edge_batch_size_count") >= 1


def test_malformed_and_version_mismatch_are_rejected_and_counted(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    node = node_factory()
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    agent.send_parts([b"not a protobuf \xff\xff\xff", b"x"])  # bad header
    agent.send_parts([b"only one part"])
    wrong = frame_pb2.FrameHeader(camera_id="c", sequence=1, width=4, height=4, payload_size=48)
    wrong.version.major = 9
    agent.send_parts([wrong.SerializeToString(), bytes(48)])  # unknown major version
    jpeg = frame_pb2.FrameHeader(camera_id="c", sequence=2, width=4, height=4, payload_size=5)
    jpeg.version.major = PROTOCOL_MAJOR
    jpeg.encoding = common_pb2.ENCODING_JPEG
    agent.send_parts([jpeg.SerializeToString(), b"\x00garb"])  # not a JPEG (no SOF)
    short = frame_pb2.FrameHeader(camera_id="c", sequence=3, width=8, height=8, payload_size=10)
    short.version.major = PROTOCOL_MAJOR
    short.encoding = common_pb2.ENCODING_BGR
    agent.send_parts([short.SerializeToString(), bytes(10)])  # BGR size disagrees
    agent.send_image("c", 4, image)  # and a good one still goes through
    acks = agent.acks(7)
    agent.send_image("c", 4, image)  # a resend of a processed frame: duplicate
    acks += agent.acks(1)
    status = [a.status for a in acks]
    assert status == [frame_pb2.ACK_STATUS_REJECTED] * 5 + [
        frame_pb2.ACK_STATUS_QUEUED,
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
    ]
    assert "version" in acks[2].reason and "9.0" in acks[2].reason
    reg = node.metrics.registry
    checks = (("header", 1), ("parts", 1), ("version", 1), ("undecodable", 1), ("payload", 1))
    for reason, n in checks:
        assert sample(reg, "strata_edge_rejected_total", {"reason": reason}) == n, reason
    assert sample(reg, "strata_edge_frames_total", {"status": "rejected"}) == 5
    assert sample(reg, "strata_edge_frames_total", {"status": "duplicate"}) == 1
    assert node.error is None


def test_overload_answers_busy_never_sheds_silently(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # A burst far beyond the camera's credit: what is not taken is answered BUSY (the
    # agent keeps it), every taken frame is processed; nothing is dropped unannounced.
    node = node_factory(
        batching={"max_batch": 1, "queue_per_camera": 2, "max_queue_delay_ms": 0},
        flow={"initial_credits": 2},
    )
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(agent, sub, image)
    reg = node.metrics.registry
    base = sample(reg, "strata_edge_frames_processed_total")
    burst = 200
    for seq in range(1, burst + 1):
        agent.send_image("busy", seq, image)
    agent.send_image("quiet", 1, image)
    acks = agent.acks(2 * (burst + 1), timeout_s=8.0)
    first = receipts(acks)
    busy = [a for a in first if a.status == frame_pb2.ACK_STATUS_BUSY]
    taken = [a for a in first if a.status == frame_pb2.ACK_STATUS_QUEUED]
    assert len(first) == burst + 1
    assert len(busy) + len(taken) == burst + 1 and len(busy) > 150
    assert all(0 < a.retry_after_ms <= 200 and a.credits >= 1 for a in busy)
    processed = {
        (a.camera_id, a.sequence) for a in acks if a.status == frame_pb2.ACK_STATUS_PROCESSED
    }
    assert processed == {(a.camera_id, a.sequence) for a in taken}
    results = sub.collect(len(taken), timeout_s=5.0)
    assert {(r.camera_id, r.sequence) for r in results} == processed
    # The quiet camera's only frame is not starved by the busy one.
    assert ("quiet", 1) in processed
    wait_for(lambda: sample(reg, "strata_edge_frames_processed_total") == base + len(taken))
    assert sample(reg, "strata_edge_frames_total", {"status": "busy"}) == len(busy)
    assert sample(reg, "strata_edge_drops_total", {"reason": "overload"}) == 0
    # Any EdgeInfo on an ack is the node's whole announcement, session included: agents
    # take a different session for a restart and resend everything in flight.
    infos = [a.edge for a in acks if a.HasField("edge")]
    assert infos and all(e.edge_session == node.delivery.edge_session for e in infos)


def test_resends_get_queued_again_or_duplicate_and_unknown_resends_are_redeliveries(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    node = node_factory(batching={"max_batch": 1, "max_queue_delay_ms": 0})
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(agent, sub, image)
    agent.send_image("c", 10, image)
    agent.send_image("c", 10, image, resent=True)  # still held, or already done
    acks = agent.acks(3)
    assert acks[0].status == frame_pb2.ACK_STATUS_QUEUED and acks[0].HasField("edge")
    assert acks[0].edge.edge_session == node.delivery.edge_session
    assert {a.status for a in acks[1:]} <= {
        frame_pb2.ACK_STATUS_QUEUED,
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
    }
    assert [a.status for a in acks].count(frame_pb2.ACK_STATUS_PROCESSED) == 1
    agent.send_image("c", 10, image, resent=True)  # settled: duplicate, not processed again
    assert [a.status for a in agent.acks(1)] == [frame_pb2.ACK_STATUS_DUPLICATE]
    # Same camera and sequence from another sender session is another frame.
    other = RawAgent(zctx, node.endpoints.listen, session_id=8)
    other.send_image("c", 10, image)
    assert [a.status for a in other.acks(2)] == [
        frame_pb2.ACK_STATUS_QUEUED,
        frame_pb2.ACK_STATUS_PROCESSED,
    ]
    # A resent frame this node never saw may have been published by its previous life.
    agent.send_image("c", 11, image, resent=True)
    assert [a.status for a in agent.acks(2)][-1] == frame_pb2.ACK_STATUS_PROCESSED
    results = sub.collect(3)
    assert [(r.session_id, r.sequence, r.redelivery) for r in results] == [
        (7, 10, False),
        (8, 10, False),
        (7, 11, True),
    ]
    assert sample(node.metrics.registry, "strata_edge_frames_redelivered_total") == 1


def test_no_cloud_opens_breaker_and_detection_goes_on(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip, port: int
) -> None:
    node = node_factory(
        cloud=f"127.0.0.1:{port}",  # nothing listens there
        # Every kept frame's boxes, not one look per object: the buffer must overflow.
        crops={
            "score_max": 1.0,
            "max_per_frame": 2,
            "track_interval_s": 0.0,
            "track_change_iou": 1.0,
            "track_score_change": 0.0,
            "max_per_track": 1000,
        },
        uplink={
            "failure_threshold": 2,
            "connect_timeout_s": 0.2,
            "open_s": 30,
            "queue": 5,
            "spool_path": "",  # memory only: the overflow is dropped, not spilled
        },
    )
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
    frames = [i for i in range(15, 45) if synthetic_clip.boxes(i)]
    for seq, idx in enumerate(frames, start=1):
        agent.send_image("c", seq, synthetic_clip.frame(idx).image, frame_index=idx)
        time.sleep(0.02)
    results = sub.collect(len(frames))
    assert len(results) == len(frames)
    assert all(len(r.detections) >= 1 for r in results)
    reg = node.metrics.registry
    wait_for(lambda: sample(reg, "strata_edge_breaker_state") == 2, 10.0)
    assert sample(reg, "strata_edge_breaker_state") == 2
    assert sample(reg, "strata_edge_breaker_trips_total") >= 1
    # Crops wait in the bounded buffer; the overflow is dropped and counted.
    assert node.uplink is not None and node.uplink.buffered <= 5
    assert sample(reg, "strata_edge_drops_total", {"reason": "crop_buffer_full"}) > 0


def test_missed_queue_delay_target_lowers_the_batch_size(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # A target no real queue can meet: every decision halves the limit, down to min_batch.
    node = node_factory(
        batching={"max_batch": 4, "delay_target_ms": 0.001},
        overload={"batch_limit": {"adapt_every": 1, "min_batch": 1}},
    )
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(agent, sub, image)
    final = deliver(agent, [(f"c{n % 4}", n // 4 + 1, image) for n in range(1, 41)])
    assert len(final) == 40
    assert {a.status for a in final.values()} == {frame_pb2.ACK_STATUS_PROCESSED}
    assert len(sub.collect(40)) == 40
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_batch_limit") == 1
    # Late batches are single frames: the histogram's "le=1" bucket keeps growing.
    assert sample(reg, "strata_edge_batch_size_bucket", {"le": "1.0"}) >= 20


def test_cameras_beyond_the_limit_are_rejected_and_counted(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    node = node_factory(batching={"max_cameras": 2})
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(0).image
    for cam, seq in (("a", 5), ("b", 1), ("c", 1), ("a", 3)):
        agent.send_image(cam, seq, image)
    acks = receipts(agent.acks(7))
    assert [a.status for a in acks] == [
        frame_pb2.ACK_STATUS_QUEUED,
        frame_pb2.ACK_STATUS_QUEUED,
        frame_pb2.ACK_STATUS_REJECTED,
        frame_pb2.ACK_STATUS_QUEUED,  # a known camera still gets through the check
    ]
    assert "max_cameras" in acks[2].reason
    assert sample(node.metrics.registry, "strata_edge_rejected_total", {"reason": "cameras"}) == 1


def test_a_camera_subscription_never_gets_another_camera_sharing_its_prefix(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # ZeroMQ matches topics by prefix: with the bare id as topic, "cam1" would get "cam10".
    node = node_factory()
    every, cam1 = (
        Listener(zctx, node.endpoints.publish),
        Listener(zctx, node.endpoints.publish, "cam1"),
    )
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(0).image
    wait_until_subscribed(agent, every, image)
    seq = wait_until_subscribed(agent, cam1, image, camera="cam1")
    while every.collect(1, timeout_s=0.3):  # the cam1 probes' results
        pass
    for i in range(1, 4):
        agent.send_image("cam10", i, image)
        agent.send_image("cam1", seq + i, image)
    assert sorted(m.camera_id for m in every.collect(6)) == ["cam1"] * 3 + ["cam10"] * 3
    got = cam1.collect(6, timeout_s=3.0)
    assert [m.camera_id for m in got] == ["cam1"] * 3
    assert [m.sequence for m in got] == [seq + 1, seq + 2, seq + 3]


def test_stop_with_batches_in_flight_sends_their_final_acks(
    node_factory: Any, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # The worker's final acks leave through the ingest thread; a stop that closed ingest's
    # end first left the worker blocked on a pipe nobody read (found at about 1 stop in 10).
    for trial in range(4):
        node = node_factory(
            batching={"max_batch": 2, "delay_target_ms": 60_000},
            flow={"initial_credits": 64},
        )
        agent = RawAgent(zctx, node.endpoints.listen, f"agent-{trial}")
        for seq in range(1, 41):
            agent.send_image("cam", seq, synthetic_clip.frame(seq % len(synthetic_clip)).image)
        acks = agent.acks(1, timeout_s=10)
        while not any(a.status == frame_pb2.ACK_STATUS_PROCESSED for a in acks):
            more = agent.acks(1, timeout_s=10)
            assert more, "no frame processed"
            acks += more
        t0 = time.monotonic()
        node.stop(join_timeout_s=5.0)
        assert time.monotonic() - t0 < 4.0
        assert sample(node.metrics.registry, "strata_edge_unclean_stops_total") == 0
        acks += agent.acks(80, timeout_s=1.0)
        processed = {a.sequence for a in acks if a.status == frame_pb2.ACK_STATUS_PROCESSED}
        # Every frame the node finished was acked as finished, none twice, none lost.
        assert sample(node.metrics.registry, "strata_edge_frames_processed_total") == len(processed)
