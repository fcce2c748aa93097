"""The device's cascade policy: gaps, calibration bursts and the edge's feedback."""

from __future__ import annotations

import itertools

from prometheus_client import CollectorRegistry
from pytest import approx
from strata.device.filters.burst_slots import BurstSlots
from strata.device.filters.cascade import CascadeMetrics, CascadePolicy, choose_gap, pan_gap
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
    cfg = CascadeConfig(calibrate_every=100, burst_frames=4, burst_stride=1, min_gap=1, max_gap=50)
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
    p2 = CascadePolicy(CascadeConfig(calibrate_every=1000, burst_frames=2, burst_stride=1))
    run(p2, range(0, 10))
    p2.feedback(frame_pb2.CascadeFeedback(burst_frames=2))
    assert run(p2, range(10, 13))[:2] == ["calibration", "calibration"]


def test_min_gap_is_capped() -> None:
    p = CascadePolicy(CascadeConfig(max_min_gap=4))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0] * 10))
    assert p.min_gap == 4


def test_a_scene_change_forgets_the_old_scene_and_calibrates_now() -> None:
    cfg = CascadeConfig(
        calibrate_every=1000, burst_frames=2, burst_stride=1, smoothing=0.5, target=0.9
    )
    p = CascadePolicy(cfg)
    run(p, range(0, 10))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 1.0, 1.0, 1.0]))
    assert p.min_gap == 4
    p.scene_changed()
    assert run(p, range(10, 13))[:2] == ["calibration", "calibration"]
    # The new scene's measure alone decides (the old one is not averaged in).
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.85, 0.85, 0.85]))
    assert p.min_gap == 1


def kept(policy: CascadePolicy, frames: range, motion: bool) -> int:
    return sum(d != "-" for d in run(policy, frames, motion))


def test_an_estimate_under_target_keeps_more_frames_until_it_recovers() -> None:
    cfg = CascadeConfig(calibrate_every=0, target=0.9, max_gap=40, recover_margin=0.02)
    registry = CollectorRegistry()
    p = CascadePolicy(cfg, CascadeMetrics(registry), camera_id="cam")
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0, 0.97, 0.95, 0.92, 0.93, 0.85]))
    assert (p.min_gap, p.max_gap) == (5, 40)
    window = 200
    base = (kept(p, range(0, window), True), kept(p, range(window, 2 * window), False))
    assert base == (40, 5)

    def gauge(name: str) -> float | None:
        return registry.get_sample_value(name, {"camera": "cam"})

    # The edge says the last window's spacing reached 0.8: each such window halves the gaps.
    seen = [base]
    for n in range(1, 4):
        p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.8))
        assert p.boost == n and p.edge_estimate == approx(0.8)
        start = 2 * n * window
        seen.append(
            (
                kept(p, range(start, start + window), True),
                kept(p, range(start + window, start + 2 * window), False),
            )
        )
    assert all(b[0] >= a[0] and b[1] > a[1] for a, b in itertools.pairwise(seen))
    assert seen[2][0] > seen[1][0] > seen[0][0] and seen[3][0] == window
    assert (p.min_gap, p.max_gap) == (1, 5)
    assert gauge("strata_device_estimated_accuracy") == approx(0.8)
    assert gauge("strata_device_cascade_boost") == 3
    # Counted: the estimates under the target, and every frame kept while boosted.
    assert gauge("strata_device_cascade_under_target_total") == 3
    assert gauge("strata_device_cascade_boosted_kept_total") == sum(map(sum, seen[1:]))
    # Under target still: towards every frame, and no further.
    for _ in range(10):
        p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.5))
    assert (p.min_gap, p.max_gap) == (1, 1) and p.boost == 6
    # Met, but within the margin: held. Above it: one halving undone per window.
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.91))
    assert p.boost == 6
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.95))
    assert p.boost == 5 and (p.min_gap, p.max_gap) == (1, 1)
    for _ in range(5):
        p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.95))
    assert p.boost == 0 and (p.min_gap, p.max_gap) == (5, 40)
    assert gauge("strata_device_cascade_boost") == 0


def test_the_estimate_of_the_configured_metric_decides() -> None:
    p = CascadePolicy(CascadeConfig(metric="counting", target=0.95, max_gap=8))
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.5, estimated_counting=0.97))
    assert p.boost == 0 and p.edge_estimate == approx(0.97)
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.99, estimated_counting=0.9))
    assert p.boost == 1 and p.max_gap == 4
    # Feedback without an estimate (send_next, a first burst) changes nothing.
    p.feedback(frame_pb2.CascadeFeedback(send_next=True))
    assert p.boost == 1


def test_a_periodic_burst_waits_for_motion_an_asked_one_does_not() -> None:
    cfg = CascadeConfig(calibrate_every=20, burst_frames=3, burst_stride=1, min_gap=1, max_gap=50)
    p = CascadePolicy(cfg)

    def step(i: int, motion: bool) -> str:
        """One frame as the camera decides it (the motion gate's verdict counted)."""
        pre = p.before_motion(i)
        if pre.block:
            p.count("dropped", "min_gap")
            return "-"
        if pre.force or motion:
            p.kept(i)
            p.count("kept", pre.force or "motion")
            return pre.force or "motion"
        p.count("dropped", "motion")
        return "-"

    assert [step(i, True) for i in range(4)] == ["first", "calibration", "calibration", "motion"]
    # The burst saw an empty street: the edge tracks nothing.
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=0))
    # Still from frame 4 on: the burst due at 20 waits (max_gap keeps are not bursts).
    quiet = [step(i, False) for i in range(4, 40)]
    assert "calibration" not in quiet and p.calibrations == 1
    # Motion again: the next frame starts the burst.
    assert step(40, True) == "motion"
    assert [step(i, True) for i in range(41, 44)] == ["calibration"] * 3
    assert p.calibrations == 2
    # Still again, but the edge asks: at once.
    assert step(44, False) == "-"
    p.feedback(frame_pb2.CascadeFeedback(burst_frames=20))
    assert step(45, False) == "calibration"


def test_a_still_scene_the_edge_sees_objects_in_still_calibrates() -> None:
    """A motion gate blind to the objects: the periodic bursts go on (the estimate needs
    them to say the target is missed)."""
    p = CascadePolicy(CascadeConfig(calibrate_every=20, burst_frames=3, burst_stride=1, max_gap=50))
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=4))
    for i in range(45):
        pre = p.before_motion(i)
        if pre.force:
            p.kept(i)
            p.count("kept", pre.force)
        else:
            p.count("dropped", "motion")
    assert p.calibrations == 3  # at 0, 20, 40


def test_a_burst_asked_for_during_a_burst_is_that_burst() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=100, burst_frames=3, burst_stride=1))
    assert run(p, range(2)) == ["first", "calibration"]
    p.feedback(frame_pb2.CascadeFeedback(burst_frames=20))
    assert run(p, range(2, 6)) == ["calibration", "motion", "motion", "motion"]
    assert p.calibrations == 1


def test_no_calibration_means_no_burst_even_when_the_edge_asks() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=0, min_gap=3))
    p.feedback(frame_pb2.CascadeFeedback(burst_frames=20))
    assert run(p, range(7)) == ["first", "-", "-", "motion", "-", "-", "motion"]
    assert p.calibrations == 0


def test_a_panning_camera_keeps_a_frame_per_few_pixels_then_the_calibrated_gap() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=0, max_gap=50))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0] * 10))
    assert p.min_gap == 10
    assert run(p, range(0, 30), motion=True).count("motion") == 2  # 10, 20
    assert not p.before_motion(30).block
    # The frame kept at 30 moved 12 gate pixels in 10 frames: 1.2 a frame, so a frame is
    # kept every 3 (PAN_SHIFT 4 pixels), forced, even with no motion score.
    p.camera_moved(30, 12.0)
    p.kept(30)
    assert p.pan_gap == 3
    assert run(p, range(31, 40), motion=False) == ["-", "-", "pan"] * 3
    # Still again (a kept frame with no shift): the calibrated gap is back.
    p.camera_moved(40, 0.1)
    p.kept(40)
    assert p.pan_gap == 0
    assert run(p, range(41, 51), motion=True) == ["-"] * 9 + ["motion"]
    # A cut (no shift known) is no speed either.
    p.camera_moved(60, None)
    assert p.pan_gap == 0
    assert pan_gap(4.0, 10) == 0 and pan_gap(12.0, 10) == 3 and pan_gap(100.0, 1) == 1


def test_cameras_sharing_one_burst_slot_calibrate_in_turn() -> None:
    registry = CollectorRegistry()
    metrics = CascadeMetrics(registry)
    slots = BurstSlots(1)
    cfg = CascadeConfig(calibrate_every=100, burst_frames=4, burst_stride=1, min_gap=1, max_gap=50)
    a = CascadePolicy(cfg, metrics, "a", slots)
    b = CascadePolicy(cfg, metrics, "b", slots)
    got: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(10):  # started together: both due at frame 0
        got["a"] += run(a, range(i, i + 1))
        got["b"] += run(b, range(i, i + 1))
    assert got["a"][:5] == ["first", "calibration", "calibration", "calibration", "motion"]
    # b waited while a's burst ran (frames 0-2), and had its own once a's last frame went.
    assert got["b"][:3] == ["first", "motion", "motion"]
    assert got["b"][3:7] == ["calibration"] * 4 and got["b"][7] == "motion"
    assert a.calibrations == b.calibrations == 1 and slots.holders() == set()
    waits = registry.get_sample_value("strata_device_cascade_burst_waits_total", {"camera": "b"})
    assert waits == 3


def test_a_camera_whose_frames_stop_mid_burst_gives_its_slot_back() -> None:
    slots = BurstSlots(1)
    cfg = CascadeConfig(calibrate_every=100, burst_frames=4, burst_stride=1, min_gap=1, max_gap=50)
    a = CascadePolicy(cfg, None, "a", slots)
    b = CascadePolicy(cfg, None, "b", slots)
    assert run(a, range(0, 2)) == ["first", "calibration"]
    assert run(b, range(0, 2)) == ["first", "motion"]  # no slot
    a.frames_stopped()  # the camera reopens: its burst ends, b's may start
    assert run(b, range(2, 4)) == ["calibration", "calibration"]
    # a's interrupted burst is due again, and starts once b's frames stop too.
    assert run(a, range(2, 3)) == ["motion"]
    b.frames_stopped()
    assert run(a, range(3, 5)) == ["calibration", "calibration"]


def test_frames_held_ahead_are_those_the_gap_then_blocks() -> None:
    """What the source may skip decoding (held_ahead) is never a frame the policy keeps,
    over gaps, bursts and a pan's shorter gap; and the hold is as long as the gap allows."""
    cfg = CascadeConfig(calibrate_every=40, burst_frames=3, burst_stride=1, min_gap=6, max_gap=8)
    p = CascadePolicy(cfg)
    blocked: list[bool] = []
    ahead: list[int] = []
    for i in range(120):
        pre = p.before_motion(i)
        blocked.append(pre.block)
        if not pre.block:
            if i >= 70:  # the camera pans from here: a frame in 3 (pan_gap)
                p.camera_moved(i, 12.0)
            p.kept(i)
        ahead.append(p.held_ahead(i))
    for i, n in enumerate(ahead):
        assert all(blocked[i + 1 : i + 1 + n]), (i, n)
        if n:  # the hold runs up to the first frame not blocked
            assert i + 1 + n >= len(blocked) or not blocked[i + 1 + n], (i, n)
    assert max(ahead[10:39]) == 5  # min_gap 6: the 5 frames after a kept one
    assert ahead[39] == 0  # a burst is due at frame 40
    # The edge asking for the next frame ends every hold.
    p.feedback(frame_pb2.CascadeFeedback(send_next=True))
    assert p.held_ahead(120) == 0


def test_the_floor_spaces_kept_frames_as_uniform_at_the_budget_while_tracking() -> None:
    """Tracked objects: never wider than uniform at the budget, whatever motion says and
    whatever gap calibration allows; motion keeps more above it; nothing tracked, no floor."""
    cfg = CascadeConfig(calibrate_every=0, budget=0.2, max_gap=50, max_min_gap=15)
    p = CascadePolicy(cfg)
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0] * 12, tracked_objects=2, moving_objects=2))
    assert p.min_gap == 12 and p.floor_gap == 5 and p.tracking
    # A gate blind to the objects (no motion): the floor keeps one frame in 5.
    d = run(p, range(0, 16), motion=False)
    assert [i for i, r in enumerate(d) if r != "-"] == [0, 5, 10, 15]
    assert set(d) == {"first", "floor", "-"}
    # Calibration allows 1 in 3 with motion: motion spends frames above the floor.
    p.feedback(
        frame_pb2.CascadeFeedback(
            f1_by_gap=[1.0, 1.0, 1.0, 0.5], tracked_objects=1, moving_objects=1
        )
    )
    assert p.min_gap == 3
    assert [i for i, r in enumerate(run(p, range(16, 25))) if r != "-"] == [2, 5, 8]
    # Nothing tracked: quiet frames cost nothing until max_gap.
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=0))
    d = run(p, range(25, 80), motion=False)
    assert [25 + i for i, r in enumerate(d) if r != "-"] == [74]


def test_held_ahead_stops_at_the_floor() -> None:
    p = CascadePolicy(CascadeConfig(calibrate_every=0, budget=0.25))
    p.feedback(frame_pb2.CascadeFeedback(f1_by_gap=[1.0] * 10))
    run(p, range(0, 1))
    assert p.held_ahead(0) == 9  # nothing tracked: min_gap 10
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=1, moving_objects=1))
    assert p.held_ahead(0) == 3  # the floor: 1 in 4


def test_a_target_it_cannot_reach_is_reported_missed() -> None:
    """Under the target with every frame max_share allows kept: missed, by how much; while
    the gaps can still shrink, only boosted."""
    registry = CollectorRegistry()
    metrics = CascadeMetrics(registry)
    cfg = CascadeConfig(calibrate_every=0, target=0.9, max_gap=8, max_share=0.5, budget=0.25)
    p = CascadePolicy(cfg, metrics, "cam")
    # The target is on /metrics beside the estimate (the console shows both).
    target = {"camera": "cam", "metric": "f1"}
    assert registry.get_sample_value("strata_device_cascade_target", target) == 0.9

    def missed() -> float:
        v = registry.get_sample_value("strata_device_cascade_target_missed", {"camera": "cam"})
        return -1.0 if v is None else v

    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.8))
    assert p.boost == 1 and p.max_gap == 4 and missed() == 0.0
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.8))
    assert p.max_gap == 2 and p.min_gap == 2 and p.floor_gap == 2 and missed() == 0.0
    # Gaps at ceil(1 / max_share) = 2: the next estimate under the target is a miss.
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.85))
    assert p.max_gap == 2 and missed() == approx(0.05) and p.target_missed == approx(0.05)
    # Overload degrading the camera: missed even with room left.
    q = CascadePolicy(CascadeConfig(calibrate_every=0, target=0.9), metrics, "cam2")
    q.overloaded()
    q.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.7))
    assert q.target_missed == approx(0.2)
    q.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.95))
    assert q.target_missed == 0.0


def test_no_floor_for_objects_that_do_not_move() -> None:
    """A parked car tracked on a still street: quiet frames cost nothing (max_gap aside)."""
    p = CascadePolicy(CascadeConfig(calibrate_every=0, budget=0.2, max_gap=50))
    p.feedback(frame_pb2.CascadeFeedback(tracked_objects=2, moving_objects=0))
    d = run(p, range(0, 60), motion=False)
    assert [i for i, r in enumerate(d) if r != "-"] == [0, 50]


def test_frames_given_up_count_against_the_estimate() -> None:
    """The edge's estimate covers the frames it answered: 40 of a window's 100 frames given
    up (overload) make an estimate of 1.0 a target missed by 0.3; a window with none lost is
    held again."""
    p = CascadePolicy(CascadeConfig(calibrate_every=0, target=0.9), None, "cam")
    run(p, range(101))
    p.lost(40)
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=1.0))
    assert p.target_missed == approx(0.3) and p.boost == 0  # more frames would not help
    run(p, range(101, 201))
    p.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.95))
    assert p.target_missed == 0.0
    # Said when the frames are given up, not only at the next estimate (windows are long).
    run(p, range(201, 301))
    p.lost(50)
    assert p.target_missed == approx(0.9 - 0.95 * 0.5)
    p.lost(1)  # more lost: missed by more, never by less
    assert p.target_missed == approx(0.9 - 0.95 * 0.49)
