"""The one IoU and box matching every part of strata uses."""

from __future__ import annotations

import numpy as np
import pytest
from strata.shared.vision.boxes import (
    FrameBoxes,
    area,
    greedy_pairs,
    intersection,
    iou,
    match_count,
)


def fb(*boxes: tuple[float, float, float, float, int]) -> FrameBoxes:
    arr = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    return FrameBoxes.of(arr, np.array([b[4] for b in boxes], np.int32))


def test_iou_area_and_intersection() -> None:
    a = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    b = np.array([[0, 0, 10, 5], [5, 0, 15, 10], [100, 100, 110, 110]], np.float32)
    m = iou(a, b)
    assert m.shape == (2, 3) and m.dtype == np.float32
    np.testing.assert_allclose(m[0], [0.5, 50 / 150, 0.0], rtol=1e-6)
    np.testing.assert_allclose(m[1], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(area(b), [50, 100, 100])
    np.testing.assert_allclose(intersection(a, b)[0], [50, 50, 0])
    degenerate = np.array([[5, 5, 5, 5]], np.float32)  # zero area: IoU 0, not NaN
    assert iou(degenerate, degenerate)[0, 0] == 0.0
    assert iou(np.zeros((0, 4), np.float32), b).shape == (0, 3)


def test_greedy_pairs_take_the_best_overlap_first_one_to_one() -> None:
    m = np.array([[0.9, 0.8], [0.85, 0.1]], np.float32)
    rows, cols = greedy_pairs(m, 0.5)
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 0)]
    rows, cols = greedy_pairs(m, 0.05)
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 0), (1, 1)]
    assert m[0, 0] == pytest.approx(0.9)  # the input is left alone


def test_match_count_is_one_to_one_and_class_aware() -> None:
    ref = fb((0, 0, 10, 10, 0), (20, 20, 30, 30, 1))
    assert match_count(ref, fb((0, 0, 10, 10, 0), (1, 1, 10, 10, 0))) == 1
    assert match_count(ref, fb((20, 20, 30, 30, 0))) == 0  # right place, wrong class
    assert match_count(ref, ref) == 2
    assert match_count(ref, FrameBoxes.empty()) == 0
    # Greedy by IoU, not mutual best: the second test box still finds its partner.
    near = fb((0, 0, 10, 10, 0), (0, 0, 10, 9, 0))
    assert match_count(near, fb((0, 0, 10, 9.5, 0), (0, 0, 10, 8, 0))) == 2


def test_frame_boxes_of_checks_lengths() -> None:
    boxes = FrameBoxes.of(np.zeros((2, 4)), np.zeros(2))
    assert len(boxes) == 2 and boxes.scores.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="2 boxes, 3 classes"):
        FrameBoxes.of(np.zeros((2, 4)), np.zeros(3))
