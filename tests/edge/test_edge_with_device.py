"""The real device agent (strata.device) feeding a real edge node over loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from device_rig import COUNTED, running_agent, running_edge
from edge_testkit import MODEL_SIZE
from prometheus_client import CollectorRegistry
from strata.device.metrics import CameraCounts
from strata.shared.config.device import (
    CameraConfig,
    CascadeConfig,
    DeviceConfig,
    GateConfig,
    MotionConfig,
    SenderConfig,
)
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CLIP = "synthetic://?frames=60&seed=1&width=320&height=240&objects=3&fps=10&realtime=0"


@pytest.mark.parametrize("encoding", ["bgr", "jpeg", "jpeg-from-yuv"])
def test_device_agent_to_edge_node_detections_match_ground_truth(
    colour_model: Path,
    zctx: Any,
    synthetic_clip: SyntheticClip,
    synthetic_mp4: Path,
    encoding: str,
) -> None:
    # The synthetic source gives BGR frames (the JPEG goes through cv2); the same clip as
    # H.264 gives decoded YUV 4:2:0, whose JPEG is made from its planes (no BGR).
    clip = CLIP
    if encoding == "jpeg-from-yuv":
        clip, encoding = str(synthetic_mp4), "jpeg"
    # The agent's first frames must find the subscription in place.
    with running_edge(colour_model, zctx, synthetic_clip.frame(0).image) as edge:
        node = edge.node
        accepted = {"status": "accepted"}
        accepted0 = sample(node.metrics.registry, "strata_edge_frames_total", accepted)
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam-a", source=clip), CameraConfig(id="cam-b", source=clip)],
            motion=MotionConfig(enabled=False),
            gate=GateConfig(enabled=False),
            # Every frame sent and checked against the truth: a strided calibration burst
            # (the default) drops the frames between its own.
            cascade=CascadeConfig(burst_stride=1),
            sender=SenderConfig(encoding=encoding, jpeg_quality=95),
        )
        with running_agent(config) as agent:
            results = edge.collect(2 * len(synthetic_clip), timeout_s=60.0)
    assert len(results) == 2 * len(synthetic_clip)
    assert {r.camera_id for r in results} == {"cam-a", "cam-b"}
    assert (
        sample(node.metrics.registry, "strata_edge_frames_total", {"status": "accepted"})
        == accepted0 + 120
    )
    # No ack made the agent think the node restarted and resend what it had in flight (an
    # EdgeInfo without a session on every QUEUED ack did: 205 resends of 120 frames, the
    # node answering "requeued"). The only resends are of frames the node answered BUSY.
    for cam in ("cam-a", "cam-b"):
        counts = CameraCounts.read(agent.metrics.registry, cam)
        assert counts.retransmitted <= counts.busy, counts
    assert sample(node.metrics.registry, "strata_edge_frames_total", {"status": "requeued"}) == 0
    tol = 3.0 if encoding == "jpeg" else 2.0
    checked = 0
    for msg in results:
        truth = synthetic_clip.boxes(msg.frame_index)
        by_label = {d.label: d for d in msg.detections}
        assert set(by_label) <= {t.label for t in truth}
        for t in truth:
            # Overlapping objects hide each other's edges; compare the unoccluded ones.
            if any(
                o is not t and o.x1 < t.x2 and t.x1 < o.x2 and o.y1 < t.y2 and t.y1 < o.y2
                for o in truth
            ):
                continue
            d = by_label[t.label]
            got = [d.box.x1, d.box.y1, d.box.x2, d.box.y2]
            np.testing.assert_allclose(got, [t.x1, t.y1, t.x2, t.y2], atol=tol)
            checked += 1
    assert checked > 40


def test_cascade_every_frame_answered_h264_scaled_to_the_model(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # The clip plays as fast as it decodes: COUNTED's credits cover all 20 kept frames, so
    # the count below is exact (the stream order under BUSY is the delivery unit test's:
    # later units wait for the refused one).
    image = synthetic_clip.frame(0).image
    edge_rig = running_edge(
        colour_model, zctx, image, "cam", tracking={"answer": "interpolate"}, **COUNTED
    )
    registry = CollectorRegistry()
    with edge_rig as edge:
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=CLIP)],
            motion=MotionConfig(enabled=False),
            gate=GateConfig(enabled=False),
            sender=SenderConfig(encoding="h264"),
            # One frame in 3, no calibration bursts: 20 sent, 40 answered from tracking.
            cascade=CascadeConfig(min_gap=3, calibrate_every=0),
        )
        with running_agent(config, registry) as agent:
            results = [r for r in edge.collect(60, timeout_s=60.0) if r.session_id]
    node = edge.node
    by_index = {r.frame_index: r for r in results}
    assert sorted(by_index) == list(range(60))
    detected = sorted(i for i, r in by_index.items() if not r.predicted)
    assert detected == list(range(0, 60, 3))
    assert all((r.width, r.height) == (320, 240) for r in results)
    assert all(r.note.startswith("skipped:min_gap:") for r in results if r.predicted)
    decisions = "strata_device_cascade_decisions_total"
    labels = {"camera": "cam", "decision": "dropped", "reason": "min_gap"}
    assert sample(registry, decisions, labels) == 40
    # The first frame the agent sent at full size; once the edge's ack told it the model's
    # input, frames were scaled to fit it (256x192) while decoding.
    assert agent.scale.get() == (MODEL_SIZE, MODEL_SIZE)
    assert (
        sample(
            node.metrics.registry, "strata_edge_h264_lost_total", {"reason": "h264_no_reference"}
        )
        == 0
    )


def test_an_estimate_under_target_makes_the_device_keep_more_frames(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    """A motion gate blind to the objects (threshold out of reach) keeps 1 frame in 12; the
    edge's bursts say that costs accuracy, so the estimate falls under the target and the
    device keeps more frames in the following windows."""
    image = synthetic_clip.frame(0).image
    edge_rig = running_edge(
        colour_model, zctx, image, "cam", tracking={"calibration_window": 1}, **COUNTED
    )
    registry = CollectorRegistry()
    clip = "synthetic://?frames=240&seed=3&width=320&height=240&objects=6&fps=30&realtime=1"
    with edge_rig as edge:
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=clip)],
            motion=MotionConfig(threshold=1000.0, max_interval_s=0, scene_change=0),
            gate=GateConfig(enabled=False),
            cascade=CascadeConfig(
                target=1.0, max_gap=12, calibrate_every=60, burst_frames=30, burst_stride=1
            ),
        )
        with running_agent(config, registry):
            results = [r for r in edge.collect(240, timeout_s=60.0) if r.session_id]
    node = edge.node
    detected = {r.frame_index for r in results if not r.predicted}
    # Bursts of 30 frames at 0, then at s, s + 60, s + 120: s is 60 (calibrate_every), or
    # sooner when the first burst saw no object and the edge asked for one on seeing some.
    s = min(i for i in range(30, 61) if all(i + k in detected for k in range(30)))
    # Before the first estimate: one frame in 12 (41, 53 when no burst was asked for).
    first = sorted(i for i in detected if 30 <= i < s)
    assert first and first == list(range(41, s, 12)), sorted(detected)
    # Between the later bursts (30 frames each), what the policy kept: more than one in 12
    # (at most 3 in 30 frames).
    bounds = [(s + 30, s + 60), (s + 90, s + 120), (s + 150, s + 180)]
    windows = [sum(a <= i < b for i in detected) for a, b in bounds]
    assert windows[-1] > 3 and max(windows) >= 5, windows
    cam = {"camera": "cam"}
    estimated = registry.get_sample_value("strata_device_estimated_accuracy", cam)
    at_edge = node.metrics.registry.get_sample_value("strata_edge_estimated_accuracy", cam)
    assert estimated is not None and at_edge is not None, "no estimate exported"
    assert 0.0 < estimated < 1.0 and 0.0 < at_edge < 1.0, (windows, estimated, at_edge)
    assert (sample(registry, "strata_device_cascade_boost", {"camera": "cam"}) or 0) >= 1
