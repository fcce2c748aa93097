"""Publishing results over a real PUB socket on 127.0.0.1 to a real SUB: detected frames
(boxes, labels, tracks, timing), skipped frames answered from tracking, and GPU pressure
level 4's cached answers; each final ack over a real inproc PUSH/PULL pair after its result,
journaled in a real settle journal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from edge_testkit import MODEL_SIZE, Listener
from prometheus_client import CollectorRegistry
from strata.edge.flow.delivery import Delivery, Served
from strata.edge.flow.final_acks import FinalAcks
from strata.edge.inference.detector import Detector, open_staged
from strata.edge.inference.serving import ModelIdentity, ServingModel
from strata.edge.ingest.frames import DecodedFrame, QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.edge.overload.gpu_pressure import GpuPressure, GpuPressureMetrics
from strata.edge.publish.results import Results
from strata.edge.state.checkpoint import Checkpointer, CheckpointMetrics
from strata.edge.state.checkpoint_file import VERSION, CheckpointBody
from strata.edge.state.journal import read_journal
from strata.edge.tracking.answers import Answer
from strata.edge.tracking.handoff import TrackedFrame
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.edge import (
    CheckpointConfig,
    DetectionConfig,
    EdgeConfig,
    GpuPressureConfig,
    TrackingConfig,
)
from strata.shared.contracts import frame_pb2
from strata.shared.gpu_telemetry import GpuSample
from strata.shared.metrics import sample
from strata.shared.synthetic import CLASSES, SyntheticClip
from strata.shared.vision import FrameBoxes
from strata.shared.wire import detections_topic

PROCESSED = frame_pb2.ACK_STATUS_PROCESSED
CLIP = SyntheticClip(width=320, height=240, frames=4, objects=3, seed=1)


@dataclass
class Stage:
    """Results with its real collaborators and the sockets on both ends."""

    results: Results
    metrics: EdgeMetrics
    delivery: Delivery
    checkpointer: Checkpointer
    detector: Detector
    sub: Listener
    pull: Any

    def queued(self, camera: str, seq: int, **header: Any) -> QueuedFrame:
        """A frame ingest admitted (delivery holds it until its final ack)."""
        h = frame_pb2.FrameHeader(
            camera_id=camera,
            sequence=seq,
            session_id=7,
            frame_index=seq,
            width=CLIP.width,
            height=CLIP.height,
            capture_ns=time.time_ns() - 5_000_000,
            send_ns=time.time_ns() - 4_000_000,
            **header,
        )
        assert self.delivery.precheck(h) is None
        self.delivery.admit(h)
        redelivery = bool(header.get("resent"))
        return QueuedFrame(
            h, memoryview(b""), time.time_ns(), time.monotonic(), b"agent-1", redelivery
        )

    def detected(self, frame: QueuedFrame, tracker: Tracker) -> TrackedFrame:
        image = CLIP.frame(frame.header.sequence % len(CLIP)).image
        decoded = DecodedFrame(frame, image)
        start = time.time_ns()
        (boxes,) = self.detector.finish(self.detector.launch([decoded], start))
        tracked = tracker.update(frame.header.frame_index, boxes)
        return TrackedFrame(decoded, boxes, tracked, start, time.time_ns())

    def acks(self, n: int, timeout_s: float = 5.0) -> list[tuple[bytes, frame_pb2.FrameAck]]:
        out: list[tuple[bytes, frame_pb2.FrameAck]] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            if self.pull.poll(50):
                identity, body = self.pull.recv_multipart()
                out.append((identity, frame_pb2.FrameAck.FromString(body)))
        return out

    def journaled(self) -> list[tuple[str, int, int]]:
        assert self.checkpointer.journal is not None
        self.checkpointer.journal.flush()
        got = read_journal(self.checkpointer.journal.path)
        return sorted((s.camera_id, r.first, r.status) for s in got.streams for r in s.runs)


def subscribed(pub: Any, sub: Listener, timeout_s: float = 10.0) -> None:
    """Publish probes until the SUB socket has joined (PUB/SUB's slow join), then drain."""
    probe = frame_pb2.FrameDetections(camera_id="probe").SerializeToString()
    deadline = time.monotonic() + timeout_s
    while not sub.collect(1, timeout_s=0.05):
        assert time.monotonic() < deadline, "the subscriber never joined"
        pub.send_multipart([detections_topic("probe"), probe])
    while sub.collect(1, timeout_s=0.05):
        pass


@pytest.fixture
def stage(colour_model: Path, zctx: Any, tmp_path: Path) -> Iterator[Stage]:
    cfg = EdgeConfig.model_validate({"edge_id": "edge-a", "model": {"input_size": MODEL_SIZE}})
    metrics = EdgeMetrics()
    runner = open_staged(colour_model, cfg, 1)
    detector = Detector(runner, [c[0] for c in CLASSES], DetectionConfig())
    serving = ServingModel(ModelIdentity("colour", colour_model, 3), detector, 1)

    def body() -> CheckpointBody:
        return CheckpointBody(version=VERSION, edge_id="edge-a", written_unix=time.time())

    checkpointer = Checkpointer(
        CheckpointConfig(path=str(tmp_path / "edge-a.checkpoint.json")),
        "edge-a",
        body,
        CheckpointMetrics(metrics.registry),
    )
    checkpointer.load()  # opens the settle journal
    delivery = Delivery(cfg, Served("colour", (MODEL_SIZE, MODEL_SIZE), 1), metrics)
    acks = FinalAcks(delivery, checkpointer, metrics)
    results = Results("edge-a", serving, metrics, acks)
    pub, push, pull = zctx.socket(zmq.PUB), zctx.socket(zmq.PUSH), zctx.socket(zmq.PULL)
    for s in (pub, push, pull):
        s.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    pull.bind("inproc://test-results-acks")
    push.connect("inproc://test-results-acks")
    results.open(pub)
    acks.open(push)
    sub = Listener(zctx, f"tcp://127.0.0.1:{port}")
    subscribed(pub, sub)
    try:
        yield Stage(results, metrics, delivery, checkpointer, detector, sub, pull)
    finally:
        sub.sock.close()
        for s in (pub, push, pull):
            s.close()
        assert checkpointer.journal is not None
        checkpointer.journal.close()
        serving.close()


def test_a_detected_frame_is_published_then_acked_and_journaled(stage: Stage) -> None:
    tracker = Tracker(TrackingConfig())
    tf = stage.detected(stage.queued("cam", 1), tracker)
    assert len(tf.boxes) >= 2 and tf.tracked is not None
    stage.results.frame(tf)
    (msg,) = stage.sub.collect(1, timeout_s=5.0)
    assert (msg.edge_id, msg.camera_id, msg.sequence, msg.frame_index) == ("edge-a", "cam", 1, 1)
    assert (msg.model, msg.model_version, msg.session_id) == ("colour", 3, 7)
    assert (msg.width, msg.height) == (CLIP.width, CLIP.height)
    assert not msg.predicted and not msg.redelivery and msg.note == ""
    assert [d.label for d in msg.detections] == [CLASSES[c][0] for c in tf.boxes.class_ids]
    assert [d.track_id for d in msg.detections] == tf.tracked.track_ids.tolist()
    assert all(d.track_id > 0 for d in msg.detections)
    got = [[d.box.x1, d.box.y1, d.box.x2, d.box.y2] for d in msg.detections]
    assert np.allclose(got, tf.boxes.boxes)
    t = msg.timing
    assert t.capture_ns < t.device_send_ns < t.edge_receive_ns
    assert (t.inference_start_ns, t.inference_end_ns) == (tf.start_ns, tf.end_ns)
    assert t.edge_send_ns >= t.inference_end_ns
    ((identity, ack),) = stage.acks(1)
    assert identity == b"agent-1" and ack.status == PROCESSED and ack.sequence == 1
    assert stage.journaled() == [("cam", 1, PROCESSED)]
    reg = stage.metrics.registry
    assert sample(reg, "strata_edge_frames_processed_total") == 1
    assert sample(reg, "strata_edge_detections_total") == len(tf.boxes)
    assert sample(reg, "strata_edge_camera_frames_total", {"camera": "cam"}) == 1
    assert stage.results.last["cam"].boxes is tf.boxes
    # Its resend is answered from the ledger: published once.
    again = stage.delivery.precheck(tf.decoded.header)
    assert again is not None and again.status == frame_pb2.ACK_STATUS_DUPLICATE


def test_a_redelivered_frame_is_flagged_and_counted(stage: Stage) -> None:
    stage.results.frame(
        stage.detected(stage.queued("cam", 2, resent=True), Tracker(TrackingConfig()))
    )
    (msg,) = stage.sub.collect(1, timeout_s=5.0)
    assert msg.redelivery
    assert sample(stage.metrics.registry, "strata_edge_frames_redelivered_total") == 1


def test_a_subscriber_of_one_camera_gets_only_that_camera(stage: Stage, zctx: Any) -> None:
    endpoint = stage.sub.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    only = Listener(zctx, endpoint, camera="cam1")
    tracker = Tracker(TrackingConfig())
    seq = 0

    def publish(camera: str) -> None:
        nonlocal seq
        seq += 1
        stage.results.frame(stage.detected(stage.queued(camera, seq), tracker))

    try:
        # cam1's results until it has joined (PUB/SUB's slow join).
        deadline = time.monotonic() + 10
        publish("cam1")
        while not only.collect(1, timeout_s=0.1):
            assert time.monotonic() < deadline, "the one-camera subscriber never joined"
            publish("cam1")
        while only.collect(1, timeout_s=0.1):
            pass
        # cam10 starts with cam1's id: the topic's NUL keeps it out. The PUB socket keeps
        # order, so once the cam1 result sent after it arrives, cam10's would have too.
        publish("cam10")
        publish("cam1")
        got = only.collect(2, timeout_s=1.0)
        assert [(m.camera_id, m.sequence) for m in got] == [("cam1", seq)]
    finally:
        only.sock.close()


def test_a_skipped_frame_is_answered_from_tracking_flagged_predicted(stage: Stage) -> None:
    tracker = Tracker(TrackingConfig())
    stage.results.frame(stage.detected(stage.queued("cam", 1), tracker))
    stage.sub.collect(1, timeout_s=5.0)
    stage.acks(1)
    skipped = stage.queued("cam", 2, skip_reason="gate")
    predicted = tracker.predict(2, CLIP.width, CLIP.height)
    assert len(predicted) >= 2
    h = skipped.header
    stage.results.answer(
        Answer(h, predicted, skipped.received, skipped.receive_ns, "predicted", skipped)
    )
    # A notice handed in without its message (token None) is published, never acked.
    other = frame_pb2.FrameHeader(camera_id="cam", sequence=3, session_id=7, skip_reason="motion")
    stage.results.answer(Answer(other, predicted, time.monotonic(), time.time_ns(), "interpolated"))
    a, b = stage.sub.collect(2, timeout_s=5.0)
    assert (a.sequence, a.predicted, a.note) == (2, True, "skipped:gate:predicted")
    assert (b.sequence, b.predicted, b.note) == (3, True, "skipped:motion:interpolated")
    assert [d.track_id for d in a.detections] == predicted.track_ids.tolist()
    assert a.timing.edge_receive_ns == skipped.receive_ns and a.timing.inference_start_ns == 0
    acks = stage.acks(2, timeout_s=1.0)
    assert [(ack.sequence, ack.status) for _, ack in acks] == [(2, PROCESSED)]
    assert stage.journaled() == [("cam", 1, PROCESSED), ("cam", 2, PROCESSED)]
    # Answers are not detections: neither processed nor their boxes counted.
    reg = stage.metrics.registry
    assert sample(reg, "strata_edge_frames_processed_total") == 1
    assert sample(reg, "strata_edge_camera_frames_total", {"camera": "cam"}) == 3


def level_4(low_priority: list[str], reg: CollectorRegistry) -> GpuPressure:
    cfg = GpuPressureConfig(enabled=True, step_s=0, low_priority_cameras=low_priority)
    gpu = GpuPressure(cfg, GpuPressureMetrics(reg))
    full = GpuSample(0, "GPU-test", "Injected", memory_used_bytes=99, memory_total_bytes=100)
    for _ in range(4):
        gpu.tick([full])
    assert gpu.level == 4
    return gpu


def test_level_4_answers_low_priority_cameras_from_their_last_result(stage: Stage) -> None:
    tracker = Tracker(TrackingConfig())
    first = stage.detected(stage.queued("lobby", 1), tracker)
    stage.results.frame(first)
    stage.sub.collect(1, timeout_s=5.0)
    stage.acks(1)
    reg = CollectorRegistry()
    gpu = level_4(["lobby", "gate"], reg)
    lobby, door, gate = stage.queued("lobby", 2), stage.queued("door", 1), stage.queued("gate", 1)
    abandoned: list[tuple[str, int]] = []
    rest = stage.results.from_cache(
        [lobby, door, gate], gpu, lambda h: abandoned.append((h.camera_id, h.sequence))
    )
    # door is not low priority; gate has no result to answer with yet: both need the detector.
    assert rest == [door, gate]
    assert abandoned == [("lobby", 2)]
    (msg,) = stage.sub.collect(1, timeout_s=5.0)
    assert (msg.camera_id, msg.sequence, msg.predicted, msg.note) == ("lobby", 2, True, "degraded")
    assert [d.class_id for d in msg.detections] == first.boxes.class_ids.tolist()
    assert first.tracked is not None
    assert [d.track_id for d in msg.detections] == first.tracked.track_ids.tolist()
    assert [(ack.sequence, ack.status) for _, ack in stage.acks(1)] == [(2, PROCESSED)]
    cached = {"action": "cached_result"}
    assert sample(reg, "strata_edge_degradation_actions_total", cached) == 1
    # The cached answer is not the camera's new last result: the detected one stays.
    assert stage.results.last["lobby"].boxes is first.boxes
    stage.results.forget_cameras(["lobby"])
    assert "lobby" not in stage.results.last
    assert stage.results.from_cache([stage.queued("lobby", 3)], gpu, lambda h: None) != []


def test_an_unknown_class_id_is_published_by_number(stage: Stage) -> None:
    frame = stage.queued("cam", 1)
    boxes = FrameBoxes.of(np.array([[1, 2, 30, 40], [5, 5, 9, 9]]), np.array([1, 7]))
    decoded = DecodedFrame(frame, CLIP.frame(0).image)
    stage.results.frame(TrackedFrame(decoded, boxes, None, 1, 2))
    (msg,) = stage.sub.collect(1, timeout_s=5.0)
    assert [(d.label, d.track_id) for d in msg.detections] == [("car", 0), ("7", 0)]
