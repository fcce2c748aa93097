"""The cascade in a real node over loopback: skipped frames answered from tracking, scaled
payloads in source pixels, H.264 with a lost frame, a new size and a keyframe request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.device.transport.encoder import H264Encoder
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip
from strata.shared.wire import pack_frame

pytestmark = pytest.mark.timeout(120)
SESSION = 77


@pytest.fixture
def node(colour_model: Path) -> Iterator[EdgeNode]:
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {
                "max_batch": 4,
                "max_queue_delay_ms": 5,
                "queue_per_camera": 64,
                "delay_target_ms": 60_000,
            },
            # The raw agent sends without waiting: credits for its whole burst.
            "flow": {"initial_credits": 64},
            "overload": {"gpu_pressure": {"enabled": False}},
        }
    )
    n = build_node(cfg, colour_model, "colour")
    n.start()
    yield n
    n.stop()


def send(agent: RawAgent, header: frame_pb2.FrameHeader, payload: Any = b"") -> None:
    header.agent_id = agent.agent_id
    header.session_id = SESSION
    agent.sock.send_multipart(pack_frame(header, payload), copy=False)


def connected(node: EdgeNode, zctx: Any, clip: SyntheticClip) -> tuple[Listener, RawAgent]:
    """A subscriber to the node's results and a raw agent, the subscription in place."""
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    wait_until_subscribed(agent, sub, clip.frame(0).image)
    return sub, agent


def send_kept(agent: RawAgent, seq: int, index: int, clip: SyntheticClip) -> None:
    """Frame `index` kept: as if scaled down by 2 from a source twice its size (the agent
    scaling to the model's input); results come back in source pixels."""
    image = clip.frame(index).image
    h, w = image.shape[:2]
    hdr = frame_pb2.FrameHeader(camera_id="cam", sequence=seq, frame_index=index)
    hdr.width, hdr.height = w, h
    hdr.source_width, hdr.source_height = 2 * w, 2 * h
    hdr.encoding = common_pb2.ENCODING_BGR
    send(agent, hdr, image)


def test_every_frame_gets_a_result_skipped_ones_from_tracking(
    node: EdgeNode, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    sub, agent = connected(node, zctx, synthetic_clip)
    h, w = synthetic_clip.frame(0).image.shape[:2]
    frames = range(16, 41)
    for seq, i in enumerate(frames, start=1):
        if i % 4 == 0:
            send_kept(agent, seq, i, synthetic_clip)
        else:
            hdr = frame_pb2.FrameHeader(camera_id="cam", sequence=seq, frame_index=i)
            hdr.kind = frame_pb2.FRAME_KIND_SKIPPED
            hdr.skip_reason = "min_gap"
            hdr.width, hdr.height = 2 * w, 2 * h
            send(agent, hdr)
    results = sorted(sub.collect(len(frames)), key=lambda r: r.frame_index)
    assert [r.frame_index for r in results] == list(frames)
    detected = [r for r in results if not r.predicted]
    predicted = [r for r in results if r.predicted]
    assert [r.frame_index for r in detected] == [i for i in frames if i % 4 == 0]
    assert all(r.note.startswith("skipped:min_gap:") for r in predicted)
    assert all((r.width, r.height) == (2 * w, 2 * h) for r in results)
    # Boxes in source pixels, with the track ids the predictions carry on.
    assert all(len(r.detections) > 0 for r in detected)
    for r in detected:
        truth = synthetic_clip.boxes(r.frame_index)
        for d in r.detections:
            assert d.track_id > 0
            best = max(min(d.box.x2, 2 * t.x2) - max(d.box.x1, 2 * t.x1) for t in truth)
            assert best > 0.5 * (d.box.x2 - d.box.x1)
    ids = {d.track_id for r in detected for d in r.detections}
    assert {d.track_id for r in predicted[2:] for d in r.detections} <= ids
    reg = node.metrics.registry
    answered = sum(
        sample(reg, "strata_edge_answers_total", {"how": how})
        for how in ("predicted", "timeout", "interpolated")
    )
    assert answered == len(predicted)
    assert sample(reg, "strata_edge_skipped_frames_total", {"reason": "min_gap"}) == len(predicted)


def h264_header(seq: int, index: int, unit: Any, size: tuple[int, int]) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id="h",
        sequence=seq,
        frame_index=seq,
        width=size[0],
        height=size[1],
        encoding=common_pb2.ENCODING_H264,
        keyframe=unit.keyframe,
        stream_index=index,
    )


def acks_until(agent: RawAgent, pred: Any, timeout_s: float = 10.0) -> list[frame_pb2.FrameAck]:
    out: list[frame_pb2.FrameAck] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if agent.sock.poll(100, zmq.POLLIN):
            out.append(frame_pb2.FrameAck.FromString(agent.sock.recv()))
            if pred(out[-1]):
                break
    return out


def test_h264_lost_frame_size_change_and_keyframe_request(
    node: EdgeNode, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
    enc = H264Encoder(keyframe_interval=0)
    images = [synthetic_clip.frame(i).image for i in range(12)]
    size = (images[0].shape[1], images[0].shape[0])
    seq = index = 0

    def push(image: np.ndarray, withhold: bool = False) -> int:
        nonlocal seq, index
        unit = enc.encode(image)
        seq += 1
        index += 1
        if not withhold:
            hdr = h264_header(seq, index, unit, (image.shape[1], image.shape[0]))
            send(agent, hdr, unit.data)
        return seq

    for im in images[:3]:
        push(im)
    assert sorted(r.sequence for r in sub.collect(3)) == [1, 2, 3]
    push(images[3], withhold=True)  # given up by the agent: never arrives
    lost = push(images[4])
    # The node cannot decode it, nor what follows, and says so on the camera's next ack.
    asked = False
    for im in images[5:12]:
        push(im)
        if any(a.keyframe_request for a in acks_until(agent, lambda a: a.keyframe_request, 1.0)):
            asked = True
            break
    assert asked
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_h264_lost_total", {"reason": "h264_no_reference"}) >= 1
    assert sample(reg, "strata_edge_keyframe_requests_total") >= 1
    # A keyframe at a new size (the camera changed resolution) resumes the stream.
    big = np.ascontiguousarray(np.repeat(np.repeat(images[5], 2, 0), 2, 1))
    enc.request_keyframe("keyframe_request")
    resumed = push(big)
    after = push(np.ascontiguousarray(np.repeat(np.repeat(images[6], 2, 0), 2, 1)))
    got = {r.sequence: r for r in sub.collect(2)}
    assert set(got) == {resumed, after}
    assert (got[resumed].width, got[resumed].height) == (size[0] * 2, size[1] * 2)
    assert lost not in got


def test_a_run_of_dropped_frames_in_one_message_gets_a_result_each_and_one_final_ack(
    node: EdgeNode, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    sub, agent = connected(node, zctx, synthetic_clip)
    h, w = synthetic_clip.frame(0).image.shape[:2]
    frames = range(16, 41)
    seq, run = 0, []
    for i in frames:
        if i % 4 != 0:
            run.append(frame_pb2.SkippedFrame(frame_index=i, capture_ns=i, skip_reason="min_gap"))
            if i != frames[-1]:
                continue
        if run:  # the dropped frames before this one (or the clip's last): one message
            seq += 1
            last = run.pop()
            hdr = frame_pb2.FrameHeader(
                camera_id="cam",
                sequence=seq,
                frame_index=last.frame_index,
                capture_ns=last.capture_ns,
                kind=frame_pb2.FRAME_KIND_SKIPPED,
                skip_reason="min_gap",
                width=2 * w,
                height=2 * h,
                earlier_skipped=run,
            )
            send(agent, hdr)
            run = []
        if i % 4 == 0:
            seq += 1
            send_kept(agent, seq, i, synthetic_clip)
    results = sorted(sub.collect(len(frames)), key=lambda r: r.frame_index)
    assert [r.frame_index for r in results] == list(frames)  # a result for every frame
    predicted = [r for r in results if r.predicted]
    assert [r.frame_index for r in predicted] == [i for i in frames if i % 4 != 0]
    assert all(r.note.startswith("skipped:min_gap:") for r in predicted)
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_skipped_frames_total", {"reason": "min_gap"}) == len(predicted)
    # One final ack per message, the run's included: every sequence settled once.
    finals = acks_until(agent, lambda a: False, timeout_s=3.0)
    processed = [
        a.sequence
        for a in finals
        if a.camera_id == "cam" and a.status == frame_pb2.ACK_STATUS_PROCESSED
    ]
    assert sorted(processed) == list(range(1, seq + 1))


def test_a_run_that_is_not_in_frame_order_is_rejected_with_its_reason(
    node: EdgeNode, zctx: Any
) -> None:
    agent = RawAgent(zctx, node.endpoints.listen)
    cases = {
        1: [5, 4],  # not increasing
        2: [3, 9],  # not before the header's own frame (8)
    }
    for seq, indices in cases.items():
        hdr = frame_pb2.FrameHeader(
            camera_id="bad",
            sequence=seq,
            frame_index=8,
            width=4,
            height=4,
            kind=frame_pb2.FRAME_KIND_SKIPPED,
            earlier_skipped=[frame_pb2.SkippedFrame(frame_index=i) for i in indices],
        )
        send(agent, hdr)
    # On a kept frame a run means nothing the node can answer: rejected too.
    kept = frame_pb2.FrameHeader(
        camera_id="bad",
        sequence=3,
        frame_index=9,
        width=4,
        height=4,
        encoding=common_pb2.ENCODING_BGR,
        earlier_skipped=[frame_pb2.SkippedFrame(frame_index=1)],
    )
    send(agent, kept, np.zeros((4, 4, 3), np.uint8))
    acks = acks_until(agent, lambda a: False, timeout_s=2.0)
    rejected = {a.sequence: a.reason for a in acks if a.status == frame_pb2.ACK_STATUS_REJECTED}
    assert sorted(rejected) == [1, 2, 3]
    assert "not increasing" in rejected[1]
    assert "not before" in rejected[2]
    assert "not SKIPPED" in rejected[3]
    assert sample(node.metrics.registry, "strata_edge_rejected_total", {"reason": "run"}) == 3
