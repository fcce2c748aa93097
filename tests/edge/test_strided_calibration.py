"""Strided calibration bursts: one frame in `stride` sent, the gaps measured on them."""

from __future__ import annotations

import numpy as np
from pytest import approx
from strata.edge.tracking.calibration import (
    Calibration,
    measure_gaps,
    measure_still,
    spread_loss,
    strided_gaps,
)
from strata.edge.tracking.estimate import Curves
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes


def scene(i: int, speed: float) -> FrameBoxes:
    """Two people walking at `speed` px/frame (one turning back at frame 30), one more
    appearing at frame 22."""
    x0 = 100.0 + speed * (i if i < 30 else 60 - i)
    xs = [x0] + ([400.0 - speed * (i - 22)] if i >= 22 else [])
    b = np.array([[x, 200.0, x + 30.0, 290.0] for x in xs], np.float32)
    return FrameBoxes(b, np.full(len(xs), 0.9, np.float32), np.zeros(len(xs), np.int32))


def test_spread_loss_draws_the_loss_linearly_between_measured_gaps() -> None:
    curve = spread_loss({4: (0.7, 0.4), 6: (0.5, 0.2)}, 6)
    assert [f for f, _ in curve] == approx([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    assert [c for _, c in curve] == approx([1.0, 0.8, 0.6, 0.4, 0.3, 0.2])


def test_a_strided_burst_measures_the_gaps_a_dense_one_does() -> None:
    frames = [scene(i, 4.0) for i in range(60)]
    dense = measure_gaps(frames, TrackingConfig(), 640, 480, 15, warmup=6)
    strided = strided_gaps(frames[::3], TrackingConfig(), (640, 480), 15, 6, 3)
    # 20 frames, 2 for warm-up, 18 scored: gaps of 2..5 strides (two spans at least).
    assert len(strided.f1) == len(strided.counting) == 15 and strided.frames == 18
    assert strided.f1[0] == strided.counting[0] == 1.0
    # The measured gaps agree with the dense burst's on the same motion (other frames).
    for gap in (6, 9, 12):
        assert strided.f1[gap - 1] == approx(dense.f1[gap - 1], abs=0.12), gap
    # Between measured gaps the loss is drawn: never above the measured ends' accuracy.
    assert strided.f1[6] <= strided.f1[5] + 1e-9 or strided.f1[6] <= strided.f1[8] + 1e-9


def test_a_strided_burst_too_short_for_two_strides_measures_nothing() -> None:
    frames = [scene(i, 4.0) for i in range(0, 15, 3)]
    acc = strided_gaps(frames, TrackingConfig(), (640, 480), 15, 5, 3)
    assert acc.f1 == () and acc.counting == () and acc.frames == 3


def test_curves_of_bursts_with_other_strides_average_over_the_longest() -> None:
    curves = Curves(4)
    curves.add((1.0, 0.9, 0.8), (1.0, 0.9, 0.8), 10, 10)
    curves.add((1.0, 0.95, 0.9, 0.85, 0.8), (1.0, 0.95, 0.9, 0.85, 0.8), 10, 10)
    assert curves.f1 is not None and curves.counting is not None
    # The short curve grown on (its loss linear in the gap): 0.7, 0.6 at gaps 4, 5.
    assert curves.f1 == approx([1.0, 0.925, 0.85, 0.775, 0.7])
    assert curves.counting == approx([1.0, 0.925, 0.85, 0.775, 0.7])


def test_unchanged_frames_of_a_strided_burst_are_scored_at_their_frames() -> None:
    still = [scene(0, 0.0)] * 12
    unchanged = [False] + [True] * 10 + [False]
    s = measure_still(still, unchanged, TrackingConfig(), 640, 480, stride=3)
    assert s.frames == 10 and s.detected == s.matched == 10


def head(i: int, calibration: bool) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id="cam",
        session_id=3,
        frame_index=i,
        width=640,
        height=480,
        calibration=calibration,
    )


def test_the_edge_takes_one_frame_in_three_as_one_burst_and_measures_it() -> None:
    cal = Calibration(TrackingConfig(), max_gap=15)
    try:
        for i in range(0, 60, 3):
            assert cal.detected(head(i, True), scene(i, 4.0)) is None
        future = cal.detected(head(62, False), scene(62, 4.0))
        assert future is not None
        acc = future.result(timeout=60)
        assert acc is not None and acc.frames == 18 and len(acc.f1) == 15
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and len(fb.f1_by_gap) == 15 and fb.f1_by_gap[0] == 1.0
        # A frame off the burst's stride starts another burst (the first one dropped).
        for i in (100, 103, 106, 108, 110, 112, 114):
            cal.detected(head(i, True), scene(i % 60, 4.0))
        short = cal.detected(head(130, False), scene(10, 4.0))
        assert short is not None and short.result(timeout=60) is None
    finally:
        cal.close()


def test_a_frame_kept_between_a_strided_burst_s_frames_does_not_end_it() -> None:
    cal = Calibration(TrackingConfig(), max_gap=15)
    try:
        for i in range(0, 30, 3):
            assert cal.detected(head(i, True), scene(i, 4.0)) is None
            if i:  # the device kept a frame between (a pan): the burst goes on
                assert cal.detected(head(i + 1, False), scene(i + 1, 4.0)) is None
        future = cal.detected(head(31, False), scene(31, 4.0))
        assert future is not None
        acc = future.result(timeout=60)
        assert acc is not None and acc.frames == 8
    finally:
        cal.close()
