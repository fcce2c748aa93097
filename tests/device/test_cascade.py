"""The device's cascade policy: gaps, calibration bursts and the edge's feedback."""

from __future__ import annotations

from strata.device.cascade import CascadePolicy, choose_gap
from strata.shared.config.device import CascadeConfig
from strata.shared.contracts import frame_pb2


def run(policy: CascadePolicy, frames: range, motion: bool = True) -> list[str]:
    """The decision per frame: a keep reason, or '-' for a drop."""
    out = []
    for i in frames:
        pre = policy.before_motion(i)
        keep = pre.force or ("" if pre.block or not motion else "motion")
        if keep:
            policy.kept(i)
        out.append(keep or "-")
    return out


def test_choose_gap_is_the_longest_prefix_meeting_the_target() -> None:
    assert choose_gap([1.0, 0.97, 0.93, 0.88, 0.91], 0.9, 1) == 3
    assert choose_gap([1.0, 0.8], 0.9, 4) == 1
    assert choose_gap([0.5], 0.9, 4) == 1
    assert choose_gap([], 0.9, 4) == 4


def test_bursts_then_min_gap_from_feedback() -> None:
    cfg = CascadeConfig(calibrate_every=100, burst_frames=4, min_gap=1, max_gap=50)
    p = CascadePolicy(cfg)
    d = run(p, range(0, 6))
    assert d == ["first", "calibration", "calibration", "calibration", "motion", "motion"]
    assert p.calibrations == 1
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.95, 0.91, 0.85]))
    assert p.min_gap == 3 and abs(p.estimated - 0.91) < 1e-6
    assert run(p, range(6, 12)) == ["-", "-", "motion", "-", "-", "motion"]
    # The next burst is due 100 frames after the first.
    assert run(p, range(100, 103)) == ["calibration"] * 3


def test_counting_target_and_quiet_scenes_and_send_next() -> None:
    cfg = CascadeConfig(metric="counting", target=0.95, calibrate_every=0, max_gap=5)
    p = CascadePolicy(cfg)
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.5], counting_by_gap=[1, 1, 1, 0.9]))
    assert p.min_gap == 3
    d = run(p, range(0, 11), motion=False)
    assert d == ["first", "-", "-", "-", "-", "max_gap", "-", "-", "-", "-", "max_gap"]
    p.feedback(frame_pb2.CascadeFeedback(send_next=True))
    assert run(p, range(11, 13)) == ["uncertain", "-"]
    # The edge asking for a burst starts one now.
    p2 = CascadePolicy(CascadeConfig(calibrate_every=1000, burst_frames=2))
    run(p2, range(0, 10))
    p2.feedback(frame_pb2.CascadeFeedback(burst_frames=2))
    assert run(p2, range(10, 13))[:2] == ["calibration", "calibration"]


def test_min_gap_is_capped() -> None:
    p = CascadePolicy(CascadeConfig(max_min_gap=4))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0] * 10))
    assert p.min_gap == 4


def test_a_scene_change_forgets_the_old_scene_and_calibrates_now() -> None:
    cfg = CascadeConfig(calibrate_every=1000, burst_frames=2, smoothing=0.5, target=0.9)
    p = CascadePolicy(cfg)
    run(p, range(0, 10))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 1.0, 1.0, 1.0]))
    assert p.min_gap == 4
    p.scene_changed()
    assert run(p, range(10, 13))[:2] == ["calibration", "calibration"]
    # The new scene's measure alone decides (the old one is not averaged in).
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.85, 0.85, 0.85]))
    assert p.min_gap == 1
