from __future__ import annotations

import numpy as np
import pytest
from strata.shared.models import InputSpec
from strata.shared.vision.yolo import FrameBoxes
from strata.tools.models.agreement import box_iou, match_count
from strata.tools.models.inputs import prepare


def test_letterbox_input_is_rgb_scaled_and_padded() -> None:
    spec = InputSpec(name="images", shape=(None, 3, 64, 64), resize="letterbox", colour="RGB")
    frame = np.zeros((100, 200, 3), np.uint8)
    frame[:, :] = (0, 0, 255)  # pure red in BGR
    x = prepare(spec, [frame, frame])
    assert x.shape == (2, 3, 64, 64) and x.dtype == np.float32
    assert x[1, 0, 32, 32] == pytest.approx(1.0)  # R first
    assert x[1, 2, 32, 32] == pytest.approx(0.0)
    assert x[1, 0, 0, 0] == pytest.approx(114 / 255)  # padding above the image


def test_stretch_input_normalises_per_channel_in_model_order() -> None:
    spec = InputSpec(
        name="x", shape=(1, 3, 8, 8), colour="RGB", mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0)
    )
    frame = np.zeros((16, 16, 3), np.uint8)
    frame[:, :, 2] = 255  # red
    x = prepare(spec, [frame])
    np.testing.assert_allclose(x[0, :, 0, 0], [2.0, -1.0, -0.5], rtol=1e-6)
    with pytest.raises(ValueError, match="uint8 BGR"):
        prepare(spec, [np.zeros((8, 8), np.uint8)])


def test_box_iou_and_one_to_one_matching() -> None:
    a = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    b = np.array([[0, 0, 10, 5], [20, 20, 30, 30], [100, 100, 110, 110]], np.float32)
    np.testing.assert_allclose(box_iou(a, b)[0], [0.5, 0, 0])
    ref = FrameBoxes(a, np.ones(2, np.float32), np.zeros(2, np.int32))
    test = FrameBoxes(b, np.ones(3, np.float32), np.zeros(3, np.int32))
    assert match_count(ref, test, 0.5) == 2
    other = FrameBoxes(b, np.ones(3, np.float32), np.ones(3, np.int32))
    assert match_count(ref, other, 0.5) == 0
    # Two test boxes on one reference box: only one may match.
    dup = FrameBoxes(a[[0, 0]], np.ones(2, np.float32), np.zeros(2, np.int32))
    assert match_count(ref, dup, 0.5) == 1
