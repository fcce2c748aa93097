import numpy as np
import pytest
from strata.shared.vision import LetterboxWriter, decode_yolo, plan_letterbox
from strata.shared.vision.letterbox import Preprocess


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


@pytest.mark.parametrize("resize", ["letterbox", "letterbox_topleft", "stretch"])
@pytest.mark.parametrize("rgb", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_letterbox_values_are_the_manifests_formula(resize: str, rgb: bool, dtype: type) -> None:
    import cv2

    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (180, 301, 3), np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    pre = Preprocess(128, resize, rgb, 1 / 255, mean, std)  # type: ignore[arg-type]
    writer = LetterboxWriter(128, pre)
    dst = np.full((2, 3, 128, 128), np.nan, dtype)
    for _ in range(2):  # the second frame of a shape reuses the scratch planes
        lb = writer.write(img, dst[1])
    assert np.isnan(dst[0]).all()  # nothing outside its slot
    body = cv2.resize(img, (lb.new_w, lb.new_h), interpolation=cv2.INTER_LINEAR)
    want = np.empty((3, 128, 128), np.float64)
    order = (2, 1, 0) if rgb else (0, 1, 2)
    for c, src in enumerate(order):
        want[c] = (114 / 255 - mean[c]) / std[c]
        y, x = lb.pad_y, lb.pad_x
        want[c, y : y + lb.new_h, x : x + lb.new_w] = (body[:, :, src] / 255 - mean[c]) / std[c]
    np.testing.assert_allclose(dst[1], want, atol=2e-2 if dtype == np.float16 else 1e-5)


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
