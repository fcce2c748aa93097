"""Strided calibration bursts: one frame in `burst_stride` (by default half the floor's
gap), the frames between dropped; a cut restarts the burst on the new scene."""

from __future__ import annotations

from pathlib import Path

from strata.device.filters.cascade import CascadePolicy
from strata.shared.config.device import CascadeConfig
from strata.shared.synthetic import SyntheticClip

from .clip_media import write_clip
from .test_camera_cascade import _run
from .test_cascade import run


def test_a_burst_sends_one_frame_in_half_the_floor_s_gap() -> None:
    # budget 0.15: the floor keeps one frame in 6, a burst one in 3, and half as many
    # frames as a burst of every frame (8): 4.
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=8, budget=0.15))
    pres = [p.before_motion(0)]
    assert pres[0].calibration and pres[0].burst_start
    p.kept(0)
    assert p.held_ahead(0) == 2  # the frames up to the burst's next need no decoding
    burst = ["first", "-", "-", "calibration", "-", "-", "calibration", "-", "-", "calibration"]
    assert ["first", *run(p, range(1, 14))] == [*burst, "motion", "motion", "motion", "motion"]
    assert p.calibrations == 1


def test_the_stride_is_the_configured_one_or_every_frame_without_a_floor() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=5, burst_stride=2))
    assert run(p, range(6)) == ["first", "-", "calibration", "-", "calibration", "motion"]
    q = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=3, budget=0))
    assert run(q, range(4)) == ["first", "calibration", "calibration", "motion"]


def test_a_panning_camera_s_burst_is_no_sparser_than_the_pan_allows() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=3, budget=0.1))
    p.kept(0)
    p.pan_gap = 2  # the camera pans: one frame in 2 (camera_moved)
    p.request_burst()
    assert p.before_motion(3).burst_start
    assert p.burst_stride() == 2


def test_a_cut_on_a_burst_frame_restarts_the_burst_from_it() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=8, budget=0.15))
    assert run(p, range(4)) == ["first", "-", "-", "calibration"]
    p.scene_changed()  # frame 3, a burst frame, shows a cut: the new scene's first
    rest = ["-", "-", "calibration", "-", "-", "calibration", "-", "-", "calibration"]
    assert run(p, range(4, 14)) == [*rest, "motion"]
    assert p.calibrations == 1


def test_a_cut_between_burst_frames_starts_a_new_burst_on_the_next_frame() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=6, budget=0.15))
    assert run(p, range(2)) == ["first", "-"]
    # Frame 2, between the burst's frames, is kept for a cut (camera.py keeps a held-back
    # frame whose whole picture changed): none of the burst's.
    p.kept(2)
    p.scene_changed()
    d = run(p, range(3, 10))
    assert d == ["calibration", "-", "-", "calibration", "-", "-", "calibration"]
    assert p.calibrations == 2


def test_a_camera_s_strided_burst_frames_say_whether_the_gate_would_drop_them(
    tmp_path: Path,
) -> None:
    still = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4).frame(0).image
    moved = still.copy()
    moved[80:160, 100:180] = 255
    images = [still] * 8 + [moved] * 13
    clip = write_clip(tmp_path / "burst.mp4", images)
    cfg = CascadeConfig(calibrate_every=1000, burst_frames=13, burst_stride=3)
    items, _ = _run(clip, 21, cfg)
    burst = [i for i in items if i.calibration]
    assert [i.index for i in burst] == [0, 3, 6, 9, 12, 15, 18]
    assert all(i.skip_reason == "min_gap" for i in items if i.index % 3 and i.index < 18)
    # The first is the reference; 9 shows the box (kept by the gate alone), the rest not.
    assert [i.unchanged for i in burst] == [False, True, True, False, True, True, True]


def test_a_burst_s_first_frames_are_codec_probes(tmp_path: Path) -> None:
    # Two bursts (frames 0 and 12). No edge has said its codec sample holds enough boxes:
    # every burst frame is a probe.
    images = [f.image for f in SyntheticClip(width=320, height=240, frames=24, seed=6)]
    clip = write_clip(tmp_path / "two.mp4", images)
    cfg = CascadeConfig(calibrate_every=12, burst_frames=8, burst_stride=2, codec_probes=2)
    items, _ = _run(clip, 24, cfg)
    probes = [i.index for i in items if i.codec_probe]
    burst = [i.index for i in items if i.calibration]
    assert probes == burst == [0, 2, 4, 6, 12, 14, 16, 18]
    none = CascadeConfig(calibrate_every=12, burst_frames=8, burst_stride=2, codec_probes=0)
    items, _ = _run(clip, 24, none)
    assert not [i for i in items if i.codec_probe]


def test_once_the_edge_s_codec_sample_is_enough_a_burst_probes_its_first_frames() -> None:
    from strata.device.filters.codec_probes import codec_probes
    from strata.shared.contracts import CODEC_MIN_BOXES, frame_pb2

    cfg = CascadeConfig(burst_frames=20, codec_probes=2)
    p = CascadePolicy(cfg)
    assert codec_probes(cfg, p.codec_boxes) == 20  # nothing heard: the whole burst
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=3))  # no codec_boxes: unchanged
    assert codec_probes(cfg, p.codec_boxes) == 20
    p.feedback(frame_pb2.CascadeFeedback(codec_boxes=CODEC_MIN_BOXES - 1))
    assert codec_probes(cfg, p.codec_boxes) == 20
    p.feedback(frame_pb2.CascadeFeedback(codec_boxes=CODEC_MIN_BOXES))
    assert codec_probes(cfg, p.codec_boxes) == 2
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=1))
    assert p.codec_boxes == CODEC_MIN_BOXES
    assert codec_probes(CascadeConfig(codec_probes=0), 0) == 0


def test_an_empty_scene_sends_only_its_first_bursts_whole_as_probes(tmp_path: Path) -> None:
    """Nothing in view adds no box to the edge's sample: after WHOLE_BURSTS whole bursts a
    burst probes its first frames only, however short the sample stays."""
    from strata.device.filters.codec_probes import WHOLE_BURSTS, codec_probes

    cfg = CascadeConfig(burst_frames=20, codec_probes=2)
    whole = [codec_probes(cfg, 0, n) for n in range(WHOLE_BURSTS + 2)]
    assert whole == [20] * WHOLE_BURSTS + [2, 2]
    # A camera's four bursts (frames 0, 12, 24, 36) with no word from an edge: the fourth
    # sends its first two frames raw, not its four.
    images = [f.image for f in SyntheticClip(width=320, height=240, frames=48, seed=6)]
    clip = write_clip(tmp_path / "four.mp4", images)
    cam = CascadeConfig(calibrate_every=12, burst_frames=8, burst_stride=2, codec_probes=2)
    items, _ = _run(clip, 48, cam)
    probes = [i.index for i in items if i.codec_probe]
    assert WHOLE_BURSTS == 3
    assert probes == [0, 2, 4, 6, 12, 14, 16, 18, 24, 26, 28, 30, 36, 38]
