"""Cascade agreement (NoScope / Reducto): tagging, counting, F1 at IoU 0.5."""

from __future__ import annotations

import numpy as np
import pytest
from strata.shared.machine import describe, one_line
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision.agreement import agreement, propagate, windowed_counting
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench.cascade import Labels, synthetic_truth


def fb(*boxes: tuple[float, float, float, float, int]) -> FrameBoxes:
    arr = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    return FrameBoxes.of(arr, np.array([b[4] for b in boxes], np.int32))


def test_propagate_reuses_the_last_kept_frame() -> None:
    a, b = fb((0, 0, 1, 1, 0)), fb()
    out = propagate({1: a, 3: b}, 5)
    assert [len(f) for f in out] == [0, 1, 1, 0, 0]
    assert out[2] is a


def test_agreement_numbers() -> None:
    one = fb((0, 0, 10, 10, 0))
    two = fb((0, 0, 10, 10, 0), (50, 50, 60, 60, 0))
    ref = [FrameBoxes.empty(), one, two, two]
    ours = [FrameBoxes.empty(), one, one, FrameBoxes.empty()]
    a = agreement(ref, ours)
    assert a.tagging == pytest.approx(3 / 4)
    # frame 0: both 0 -> 1; frame 1: 1; frame 2: 1 - 1/2; frame 3: 1 - 2/2 = 0
    assert a.counting == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert (a.true_positives, a.false_positives, a.false_negatives) == (2, 0, 3)
    assert a.f1 == pytest.approx(4 / 7)
    assert agreement(ref, ref).f1 == 1.0
    with pytest.raises(ValueError):
        agreement(ref, ours[:2])


def test_dropping_frames_of_a_synthetic_clip_costs_agreement() -> None:
    clip = SyntheticClip(width=160, height=120, frames=40, seed=2)
    truth = synthetic_truth(clip, Labels())
    assert agreement(truth, propagate(dict(enumerate(truth)), 40)).f1 == 1.0
    every_fifth = {i: truth[i] for i in range(0, 40, 5)}
    a = agreement(truth, propagate(every_fifth, 40))
    assert a.f1 < 0.9  # moving objects: a stale box misses
    assert 0 < a.tagging <= 1


def test_machine_description() -> None:
    m = describe()
    assert m["cores"] >= 1 and m["cpu"]
    assert "cores" in one_line(m)


def test_counting_per_window_scores_the_mean_count() -> None:
    one = fb((0, 0, 10, 10, 0))
    two = fb((0, 0, 10, 10, 0), (50, 50, 60, 60, 0))
    # The reference flickers 2, 1, 2, 1; ours says 2, 2, 1, 1: per frame half wrong, per
    # window of 4 the same 1.5 people.
    ref = [two, one, two, one]
    ours = [two, two, one, one]
    assert agreement(ref, ours).counting == pytest.approx(0.75)
    assert windowed_counting(ref, ours, 4) == 1.0
    # Windows of 2: 1.5 vs 2 (0.75), then 1.5 vs 1 (0.667); window 1 is per frame.
    assert windowed_counting(ref, ours, 2) == pytest.approx((0.75 + 2 / 3) / 2)
    assert windowed_counting(ref, ours, 1) == pytest.approx(0.75)
    # A short last window; empty windows agree.
    empty = FrameBoxes.empty()
    assert windowed_counting([two, two, empty], [two, two, empty], 2) == 1.0
    with pytest.raises(ValueError, match="window"):
        windowed_counting(ref, ours, 0)
