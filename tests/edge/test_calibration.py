"""Online calibration: a burst replayed at every gap, fed back for the agent's next ack."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
from pytest import approx
from strata.edge.tracking.calibration import Calibration, Estimate, estimate, measure_gaps, uniform
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes


def scene(i: int, speed: float) -> FrameBoxes:
    """Two people walking at `speed` px/frame, one appearing at frame 22."""
    xs = [100.0 + speed * i] + ([400.0 - speed * (i - 22)] if i >= 22 else [])
    b = np.array([[x, 200.0, x + 30.0, 290.0] for x in xs], np.float32)
    return FrameBoxes(b, np.full(len(xs), 0.9, np.float32), np.zeros(len(xs), np.int32))


def test_gaps_cost_more_when_objects_move_faster() -> None:
    slow = measure_gaps([scene(i, 1.0) for i in range(40)], TrackingConfig(), 640, 480, 8)
    fast = measure_gaps([scene(i, 12.0) for i in range(40)], TrackingConfig(), 640, 480, 8)
    assert slow.f1[0] == fast.f1[0] == 1.0
    assert len(slow.f1) == len(slow.counting) == 8 and slow.frames == 35
    # A new object is missed until the next kept frame: long gaps cost even when slow.
    assert slow.f1[7] < 1.0
    assert sum(fast.f1) < sum(slow.f1)


def test_uniform_keeps_the_fraction() -> None:
    assert uniform(100, 0.2).sum() == 20
    assert uniform(100, 0.4).sum() == 40
    assert uniform(10, 0).sum() == 0


def head(i: int, calibration: bool) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id="cam",
        session_id=3,
        frame_index=i,
        width=640,
        height=480,
        calibration=calibration,
    )


def test_burst_end_produces_feedback_once() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            assert cal.detected(head(i, True), scene(i, 4.0)) is None
        assert cal.take_feedback(3, "cam") is None
        future = cal.detected(head(40, False), scene(40, 4.0))
        assert future is not None
        acc = future.result(timeout=30)
        assert acc is not None and len(acc.f1) == 6
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and list(fb.f1_by_gap) == list(np.float32(acc.f1))
        assert cal.take_feedback(3, "cam") is None
        # A burst too short to measure gives no feedback.
        for i in range(50, 53):
            cal.detected(head(i, True), scene(i, 4.0))
        short = cal.detected(head(60, False), scene(60, 4.0))
        assert short is not None and short.result(timeout=30) is None
    finally:
        cal.close()


def test_a_scene_change_drops_the_old_scenes_burst_and_feedback() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            cal.detected(head(i, True), scene(i, 4.0))
        future = cal.detected(head(30, False), scene(30, 4.0))
        assert future is not None and future.result(timeout=30) is not None
        # A burst under way when the cut comes is dropped, and so is the feedback waiting.
        for i in range(40, 50):
            cal.detected(head(i, True), scene(i, 4.0))
        cut = head(50, True)
        cut.scene_change = True
        assert cal.detected(cut, scene(50, 4.0)) is None
        assert cal.take_feedback(3, "cam") is None
        # The new burst starts at the cut: 1 frame + 3 is too short to measure.
        for i in range(51, 54):
            cal.detected(head(i, True), scene(i, 4.0))
        short = cal.detected(head(60, False), scene(60, 4.0))
        assert short is not None and short.result(timeout=30) is None
    finally:
        cal.close()


def test_estimate_weights_each_gap_by_the_frames_it_spans() -> None:
    curves = [[1.0, 0.9, 0.8], [1.0, 0.7, 0.6]]
    assert estimate(curves, {2: 5}) == approx(0.8)
    # 1 gap of 1 frame at 1.0, 1 gap of 3 frames at the mean 0.7; past the curve: its end.
    assert estimate(curves, {1: 1, 3: 1}) == approx((1.0 + 3 * 0.7) / 4)
    assert estimate(curves, {9: 2}) == approx(0.7)
    assert estimate(curves, {}) is None and estimate([], {2: 1}) is None


def feed(cal: Calibration, frames: range, calibration: bool, step: int = 1) -> object:
    """Detected frames `frames[::step]`; the last future returned (a burst's end)."""
    out = None
    for i in frames[::step]:
        out = cal.detected(head(i, calibration), scene(i, 6.0)) or out
    return out


def test_the_estimate_is_the_replay_at_the_gap_in_use() -> None:
    seen: list[Estimate] = []
    cal = Calibration(TrackingConfig(), max_gap=6, window=1, on_estimate=seen.append)
    try:
        # The first burst: no spacing seen before it, so no estimate.
        feed(cal, range(0, 30), True)
        first = feed(cal, range(32, 90), False, step=3)
        assert isinstance(first, Future) and first.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and not fb.HasField("estimated_accuracy") and not seen
        # The device keeps 1 frame in 3, then bursts again: the estimate is that burst's
        # replay at gap 3.
        feed(cal, range(90, 120), True)
        end = feed(cal, range(122, 130), False, step=3)
        assert isinstance(end, Future)
        acc = end.result(timeout=30)
        assert acc is not None
        replayed = measure_gaps(
            [scene(i, 6.0) for i in range(90, 120)], TrackingConfig(), 640, 480, 6
        )
        assert replayed.f1 == acc.f1
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.HasField("estimated_accuracy")
        assert fb.estimated_accuracy == approx(acc.f1[2], abs=1e-6)
        assert fb.estimated_counting == approx(acc.counting[2], abs=1e-6)
        assert acc.f1[2] < 1.0 and [e.f1 for e in seen] == [approx(acc.f1[2])]
    finally:
        cal.close()


def test_the_estimate_smooths_over_the_window_of_bursts() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6, window=2)
    try:
        curves = []
        for start in (0, 100, 200):
            feed(cal, range(start, start + 30), True)
            end = feed(cal, range(start + 31, start + 100), False, step=2)
            assert isinstance(end, Future)
            acc = end.result(timeout=30)
            assert acc is not None
            curves.append(acc.f1)
        fb = cal.take_feedback(3, "cam")
        assert fb is not None
        assert fb.estimated_accuracy == approx((curves[1][1] + curves[2][1]) / 2, abs=1e-6)
    finally:
        cal.close()
