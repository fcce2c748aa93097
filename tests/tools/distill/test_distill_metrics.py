"""Average precision at IoU 0.5."""

from __future__ import annotations

import math

import numpy as np
import pytest
from strata.tools.distill.boxes import SOURCE_MODEL, Detections
from strata.tools.distill.metrics import average_precision


def _pred(boxes: list[list[float]], scores: list[float]) -> Detections:
    return Detections.of(
        np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(scores), SOURCE_MODEL
    )


TRUTH = [np.asarray([[0, 0, 10, 20], [50, 50, 60, 70]], np.float32), np.zeros((0, 4), np.float32)]


def test_perfect_predictions_score_one() -> None:
    preds = [_pred(TRUTH[0].tolist(), [0.9, 0.8]), _pred([], [])]
    s = average_precision(preds, TRUTH)
    assert s.ap50 == pytest.approx(1.0)
    assert s.precision == 1.0 and s.recall == 1.0 and s.truth_boxes == 2


def test_misplaced_boxes_score_zero_and_a_duplicate_is_a_false_positive() -> None:
    far = [_pred([[100, 100, 110, 120]], [0.9]), _pred([], [])]
    assert average_precision(far, TRUTH).ap50 == 0.0
    dup = [_pred([[0, 0, 10, 20], [0, 0, 10, 20]], [0.9, 0.8]), _pred([], [])]
    s = average_precision(dup, TRUTH)
    assert s.ap50 == pytest.approx(0.5)
    assert s.precision == pytest.approx(0.5)


def test_a_confident_false_positive_ranks_first_and_lowers_ap() -> None:
    preds = [
        _pred([[0, 0, 10, 20], [50, 50, 60, 70]], [0.5, 0.4]),
        _pred([[200, 200, 210, 220]], [0.95]),  # on an empty frame
    ]
    s = average_precision(preds, TRUTH)
    # Envelope: precision 2/3 up to full recall.
    assert s.ap50 == pytest.approx(2 / 3)


def test_no_truth_gives_nan_and_mismatched_lengths_fail() -> None:
    assert math.isnan(average_precision([_pred([], [])], [np.zeros((0, 4))]).ap50)
    with pytest.raises(ValueError, match="truth frames"):
        average_precision([_pred([], [])], TRUTH)
