"""A camera's cascade on a real file: a cut and a pan, seen by the frames they happen on."""

from __future__ import annotations

import zlib
from pathlib import Path

import cv2
import numpy as np
from prometheus_client import CollectorRegistry
from strata.device.camera import CameraState, CameraWorker
from strata.device.filters.cascade import CascadeMetrics
from strata.device.filters.inbox import GateInbox, GateItem
from strata.device.metrics import DeviceMetrics
from strata.shared.config.device import CascadeConfig, MotionConfig, SourceConfig
from strata.shared.synthetic import SyntheticClip

from .clip_media import write_clip


def _run(
    clip: Path,
    frames: int,
    cascade: CascadeConfig | None = None,
    source: SourceConfig | None = None,
) -> tuple[list[GateItem], CollectorRegistry]:
    registry = CollectorRegistry()
    inbox = GateInbox(1000)
    inbox.add_camera("cam")
    cam = CameraWorker(
        "cam",
        str(clip),
        source or SourceConfig(),
        MotionConfig(threshold=2.0, max_interval_s=0),
        inbox,
        DeviceMetrics(registry).camera("cam"),
        # No calibration: the gap stays 12 frames, so what the gap alone keeps is known.
        cascade or CascadeConfig(calibrate_every=0, min_gap=12, max_gap=50),
        CascadeMetrics(registry),
    )
    cam.start()
    assert cam.join(60) and cam.state is CameraState.ENDED
    items = inbox.take(frames + 10, 0.0, 1.0)
    assert len(items) == frames  # every frame: kept, or its header (send_skipped)
    return items, registry


def test_a_cut_in_a_file_is_a_scene_change_on_its_own_frame(tmp_path: Path) -> None:
    a = SyntheticClip(width=320, height=240, frames=17, objects=4, seed=1)
    b = SyntheticClip(width=320, height=240, frames=23, objects=4, seed=2)
    clip = write_clip(tmp_path / "cut.mp4", [f.image for f in a] + [f.image for f in b])
    items, registry = _run(clip, 40)
    kept = [i.index for i in items if not i.skip_reason]
    scenes = [i.index for i in items if i.scene_change]
    # The gap alone would keep 0, 12, 24, 36: the cut at 17 is kept where it happens and
    # flagged, and the gap counts from it.
    assert scenes == [17], (kept, scenes)
    assert kept == [0, 12, 17, 29], kept
    reason = {"camera": "cam", "decision": "kept", "reason": "scene_change"}
    assert registry.get_sample_value("strata_device_cascade_decisions_total", reason) == 1


def test_a_pan_in_a_file_keeps_frames_while_the_camera_moves(tmp_path: Path) -> None:
    clip = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4)
    # Blurred like a street, not pixel noise (noise that moves changes every cell: a scene
    # change, test_motion.py).
    wide = cv2.GaussianBlur(
        np.concatenate([clip.background, clip.background[:, ::-1]], axis=1), (0, 0), 3
    )
    # Still for 20 frames, then 3 source pixels a frame (1.8 of the gate's) for 30.
    xs = [0] * 20 + [3 * k for k in range(1, 31)]
    path = write_clip(
        tmp_path / "pan.mp4", [np.ascontiguousarray(wide[:, x : x + 320]) for x in xs]
    )
    items, registry = _run(path, 50)
    kept = [i.index for i in items if not i.skip_reason]
    still = [k for k in kept if k < 20]
    panning = [k for k in kept if k >= 20]
    assert still == [0], kept  # a still picture: nothing changed, nothing kept
    # While it pans, a frame at least every 3 (4 gate pixels at 1.8 a frame), not every 12.
    assert len(panning) >= 10 and max(np.diff(panning)) <= 3, kept
    pan = {"camera": "cam", "decision": "kept", "reason": "pan"}
    assert (registry.get_sample_value("strata_device_cascade_decisions_total", pan) or 0) >= 5
    assert not any(i.scene_change for i in items if i.index > 20)


def test_burst_frames_say_whether_the_motion_gate_alone_would_have_dropped_them(
    tmp_path: Path,
) -> None:
    still = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4).frame(0).image
    moved = still.copy()
    moved[80:160, 100:180] = 255
    images = [still] * 8 + [moved] * 12
    clip = write_clip(tmp_path / "burst.mp4", images)
    # A burst of all 20 frames from the first.
    items, _ = _run(clip, 20, CascadeConfig(calibrate_every=1000, burst_frames=20, burst_stride=1))
    assert all(i.calibration and not i.skip_reason for i in items)
    unchanged = [i.unchanged for i in items]
    # The first is the burst's reference; the box's frame differs from it (kept by the gate
    # alone, the new reference), the rest do not.
    assert unchanged == [False] + [True] * 7 + [False] + [True] * 11, unchanged


def test_held_frames_left_undecoded_change_nothing_the_edge_is_sent(tmp_path: Path) -> None:
    """skip_held: the gap's held-back B-frames are not decoded, and the edge gets the same
    frames, pixels and notices as when every frame is decoded (a still scene with people)."""
    clip = SyntheticClip(width=320, height=240, frames=80, objects=5, seed=7)
    path = write_clip(tmp_path / "street.mp4", [f.image for f in clip])
    cascade = CascadeConfig(calibrate_every=0, min_gap=6, max_gap=50)
    every, _ = _run(path, 80, cascade, SourceConfig(skip_held=False))
    skipped, registry = _run(path, 80, cascade, SourceConfig(skip_held=True))

    def seen(items: list[GateItem]) -> list[tuple[int, str, int]]:
        return [
            (i.index, i.skip_reason, 0 if i.skip_reason else zlib.crc32(i.frame.bgr().tobytes()))
            for i in items
        ]

    assert seen(skipped) == seen(every)
    assert len([i for i in every if not i.skip_reason]) >= 10
    held = {"camera": "cam", "reason": "held"}
    undecoded = registry.get_sample_value("strata_device_source_skipped_total", held) or 0
    assert undecoded >= 12  # B-frames among the 4 held after the first after each kept one
    decoded = registry.get_sample_value("strata_device_frames_decoded_total", {"camera": "cam"})
    assert decoded == 80 - undecoded
