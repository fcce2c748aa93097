import numpy as np
import pytest
from strata.shared.vision import LetterboxWriter, decode_yolo, plan_letterbox


def test_letterbox_plan_matches_ultralytics_rounding() -> None:
    lb = plan_letterbox(768, 576, 640)
    assert (lb.new_w, lb.new_h, lb.pad_x, lb.pad_y) == (640, 480, 0, 80)
    lb = plan_letterbox(320, 240, 256)
    assert lb.scale == pytest.approx(0.8)
    assert (lb.new_w, lb.new_h, lb.pad_x, lb.pad_y) == (256, 192, 0, 32)


def test_letterbox_writes_rgb_chw_scaled_with_grey_padding() -> None:
    img = np.zeros((240, 320, 3), np.uint8)
    img[:, :, 2] = 255  # red in BGR
    dst = np.full((3, 256, 256), -1.0, np.float32)
    lb = LetterboxWriter(256).write(img, dst)
    assert lb.pad_y == 32
    np.testing.assert_allclose(dst[:, :32, :], 114 / 255, rtol=1e-6)
    np.testing.assert_allclose(dst[:, 224:, :], 114 / 255, rtol=1e-6)
    np.testing.assert_allclose(dst[0, 32:224, :], 1.0)  # R channel first
    np.testing.assert_allclose(dst[1:, 32:224, :], 0.0)


def test_box_maps_back_to_original_pixels() -> None:
    lb = plan_letterbox(320, 240, 256)
    boxes = np.array([[8.0, 40.0, 88.0, 112.0]], np.float32)  # model-input pixels
    lb.to_original(boxes)
    np.testing.assert_allclose(boxes, [[10.0, 10.0, 110.0, 100.0]], atol=1e-4)


def _output(rows: list[tuple[float, float, float, float, int, float]], nc: int, anchors: int):
    out = np.zeros((1, 4 + nc, anchors), np.float32)
    for a, (cx, cy, w, h, c, s) in enumerate(rows):
        out[0, :4, a] = (cx, cy, w, h)
        out[0, 4 + c, a] = s
    return out


def test_decode_class_aware_nms_and_threshold() -> None:
    lb = plan_letterbox(640, 640, 640)
    out = _output(
        [
            (100, 100, 50, 50, 0, 0.9),
            (102, 101, 50, 50, 0, 0.8),  # same class, overlaps: suppressed
            (102, 101, 50, 50, 1, 0.7),  # other class, same place: kept
            (400, 400, 20, 20, 2, 0.1),  # under the threshold
        ],
        nc=3,
        anchors=10,
    )
    (res,) = decode_yolo(out, [lb], score_threshold=0.25, iou_threshold=0.5)
    assert len(res) == 2
    assert res.class_ids.tolist() == [0, 1]
    np.testing.assert_allclose(res.boxes[0], [75, 75, 125, 125])
    np.testing.assert_allclose(res.scores, [0.9, 0.7], rtol=1e-6)


def test_decode_keeps_frames_apart_and_handles_empty_frames() -> None:
    lbs = [plan_letterbox(640, 640, 640)] * 3
    out = np.zeros((3, 6, 8), np.float32)
    out[0, :4, 0] = (50, 50, 10, 10)
    out[0, 4, 0] = 0.9
    out[2, :4, 1] = (50, 50, 10, 10)  # same box in another frame: not suppressed
    out[2, 5, 1] = 0.8
    res = decode_yolo(out, lbs)
    assert [len(r) for r in res] == [1, 0, 1]
    assert res[2].class_ids.tolist() == [1]


def test_decode_rejects_wrong_layout() -> None:
    with pytest.raises(ValueError, match="4\\+classes"):
        decode_yolo(np.zeros((1, 3, 5), np.float32), [plan_letterbox(10, 10, 10)])
