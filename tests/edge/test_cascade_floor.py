"""The cascade's floor and its target, with the real device agent and a real edge node:
a clip that cuts and pans keeps the floor's spacing while the edge tracks objects, and a
target the camera cannot reach shows on its metrics, in its log and in its status."""

from __future__ import annotations

import itertools
import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from device_rig import COUNTED, EdgeRig, running_agent, running_edge
from prometheus_client import CollectorRegistry
from strata.shared.config.device import (
    CameraConfig,
    CascadeConfig,
    DeviceConfig,
    GateConfig,
    MotionConfig,
    SourceConfig,
)
from strata.shared.synthetic import SyntheticClip
from strata.tools.cascade_clips import PanRecipe, pans_clip

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

FRAMES = 240


def _edge(
    colour_model: Path, zctx: Any, image: Any, window: int = 4
) -> AbstractContextManager[EdgeRig]:
    return running_edge(
        colour_model, zctx, image, "cam", tracking={"calibration_window": window}, **COUNTED
    )


@pytest.fixture(scope="module")
def cutting_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six objects seen through a crop that stays, pans (4 px a frame) and cuts to another
    place every 40 frames (tools/cascade_clips.py's pans recipe, on a synthetic scene)."""
    work = tmp_path_factory.mktemp("floor")
    src = SyntheticClip(width=320, height=240, frames=FRAMES, fps=20, objects=6, seed=5)
    out = work / "pans.mp4"
    pans_clip(src.write(work / "scene.mp4"), out, PanRecipe(segment_s=2.0, pan_px=4))
    return out


def test_a_clip_that_cuts_and_pans_keeps_the_floor_while_tracks_live(
    colour_model: Path, zctx: Any, cutting_clip: Path
) -> None:
    """Motion gate blind to the objects (threshold out of reach), calibration off and its
    gap at 15: only the floor (budget 0.2: 1 in 5) spaces the frames while objects are
    tracked; cuts and pans keep frames above it."""
    image = SyntheticClip(width=256, height=192, frames=1).frame(0).image
    edge_rig = _edge(colour_model, zctx, image)
    registry = CollectorRegistry()
    with edge_rig as edge:
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=str(cutting_clip))],
            source=SourceConfig(realtime=True),
            motion=MotionConfig(threshold=1000.0, max_interval_s=0),
            gate=GateConfig(enabled=False),
            cascade=CascadeConfig(min_gap=15, max_gap=50, calibrate_every=0, budget=0.2),
        )
        with running_agent(config, registry):
            results = [r for r in edge.collect(FRAMES, timeout_s=60.0) if r.session_id]
    by_index = {r.frame_index: r for r in results}
    detected = sorted(i for i, r in by_index.items() if not r.predicted)
    assert len(by_index) >= FRAMES - 2, sorted(set(range(FRAMES)) - set(by_index))
    # While the edge tracks objects (its answer for the frames between two kept frames has
    # boxes), kept frames are at most the floor's 5 apart. The first kept frames of a scene
    # wait for the ack that says objects are tracked (one kept frame later).
    wide = [
        (a, b)
        for a, b in itertools.pairwise(detected)
        if b - a > 5 and any(len(by_index[i].detections) for i in range(a + 1, b) if i in by_index)
    ]
    kept_by = {
        reason: registry.get_sample_value(
            "strata_device_cascade_decisions_total",
            {"camera": "cam", "decision": "kept", "reason": reason},
        )
        or 0
        for reason in ("floor", "pan", "motion", "max_gap", "first")
    }
    assert not wide, (wide, detected, kept_by)
    assert kept_by["floor"] >= 20, kept_by
    # Not every frame: the floor spaces them, about 1 in 5 plus cuts and pans.
    assert len(detected) <= FRAMES // 2, (len(detected), kept_by)


def test_a_target_it_cannot_reach_shows_on_metrics_log_and_status(
    colour_model: Path,
    zctx: Any,
    synthetic_clip: SyntheticClip,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Target 1.0 with at most one frame in 6 (max_share), gate blind to the objects: the
    estimate stays under the target once the gaps are as short as allowed, and the camera
    says by how much it misses it."""
    edge_rig = _edge(colour_model, zctx, synthetic_clip.frame(0).image, window=1)
    registry = CollectorRegistry()
    clip = "synthetic://?frames=360&seed=3&width=320&height=240&objects=6&fps=30&realtime=1"
    caplog.set_level(logging.INFO, logger="strata.device.filters.cascade")
    with edge_rig as edge:
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=clip)],
            motion=MotionConfig(threshold=1000.0, max_interval_s=0, scene_change=0),
            gate=GateConfig(enabled=False),
            cascade=CascadeConfig(
                target=1.0,
                max_gap=12,
                max_share=1 / 6,
                budget=0,
                calibrate_every=60,
                burst_frames=30,
            ),
        )
        with running_agent(config, registry) as agent:
            edge.collect(360, timeout_s=60.0)
            status = agent.statuses()[0]
    cam = {"camera": "cam"}
    missed = registry.get_sample_value("strata_device_cascade_target_missed", cam)
    estimated = registry.get_sample_value("strata_device_estimated_accuracy", cam)
    assert estimated is not None and estimated < 1.0
    assert missed is not None and missed == pytest.approx(1.0 - estimated, abs=1e-6)
    assert status.target_missed == pytest.approx(missed, abs=1e-6)
    lines = [r.getMessage() for r in caplog.records if "MISSED" in r.getMessage()]
    assert lines and "max_share" in lines[-1], lines


def test_a_strided_burst_is_measured_by_the_edge_and_fed_back(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    """The default stride (half the floor's gap, budget 0.15: one frame in 3): a burst of
    half burst_frames (10), the frames between dropped; the edge measures it and the device
    calibrates on its answer (the calibrated gauge, from gaps of two strides and more)."""
    edge_rig = _edge(colour_model, zctx, synthetic_clip.frame(0).image)
    registry = CollectorRegistry()
    clip = "synthetic://?frames=150&seed=3&width=320&height=240&objects=6&fps=30&realtime=1"
    with edge_rig as edge:
        config = DeviceConfig(
            agent_id="agent-under-test",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=clip)],
            motion=MotionConfig(threshold=1000.0, max_interval_s=0, scene_change=0),
            gate=GateConfig(enabled=False),
            cascade=CascadeConfig(budget=0.15, calibrate_every=1000, burst_frames=20),
        )
        with running_agent(config, registry):
            results = [r for r in edge.collect(150, timeout_s=60.0) if r.session_id]
        edge_metrics = edge.node.metrics.registry
    detected = sorted({r.frame_index for r in results if not r.predicted})
    assert detected[:10] == list(range(0, 30, 3)), detected
    # The first burst's frames went as raw pixels and were detected again after a JPEG
    # round trip (codec probes, all of a camera's first burst): the colour detector loses
    # nothing to JPEG 95.
    probes = edge_metrics.get_sample_value("strata_edge_codec_probes_total", {"camera": "cam"})
    assert probes is not None and probes >= 10, probes
    boxes = edge_metrics.get_sample_value("strata_edge_codec_boxes", {"camera": "cam"})
    assert boxes is not None and boxes > 0
    loss = {"camera": "cam", "metric": "f1"}
    assert edge_metrics.get_sample_value("strata_edge_codec_loss", loss) == 0.0
    cam = {"camera": "cam"}
    kept = {"camera": "cam", "decision": "kept", "reason": "calibration"}
    # 9 after the first frame, 10 in any later burst (the edge asks for one when a burst
    # saw few boxes).
    bursts = registry.get_sample_value("strata_device_cascade_decisions_total", kept)
    assert bursts is not None and bursts >= 9 and (bursts - 9) % 10 == 0, bursts
    calibrated = registry.get_sample_value("strata_device_cascade_calibrated_accuracy", cam)
    assert calibrated is not None and 0.0 < calibrated <= 1.0
