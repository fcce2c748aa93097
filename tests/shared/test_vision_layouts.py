"""Every detector layout decoded from real ONNX Runtime outputs to boxes in frame pixels."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from layouts_testkit import (
    Obj,
    encode_detr,
    encode_end2end,
    encode_gfl,
    encode_paddle,
    encode_ssd,
    encode_yolov5,
    encode_yolov8,
    encode_yolox,
    run_constant_model,
)
from strata.shared.vision.boxes import FrameBoxes
from strata.shared.vision.layouts import (
    DECODERS,
    DetectLayout,
    LayoutError,
    Thresholds,
    check_shapes,
    decode_detections,
)
from strata.shared.vision.letterbox import Letterbox, plan_letterbox

SIZE = 64
C = 3
RESIZES = ("letterbox", "letterbox_topleft", "stretch")
TH = Thresholds(score=0.25, iou=0.45, max_detections=100)

# In the 160 x 120 frame's pixels. `dup` overlaps `a` (same class, lower score): NMS drops
# it; `low` is under the score threshold.
A = Obj((20.0, 30.0, 60.0, 90.0), 1, 0.9, level=0)
B = Obj((100.0, 10.0, 140.0, 50.0), 0, 0.8, level=1)
DUP = Obj((22.0, 32.0, 62.0, 92.0), 1, 0.6, level=1)
LOW = Obj((0.0, 0.0, 10.0, 10.0), 2, 0.1, level=0)
OBJS = [A, B, DUP, LOW]


def _lb(resize: str, w: int = 160, h: int = 120) -> Letterbox:
    return plan_letterbox(w, h, SIZE, resize)  # type: ignore[arg-type]


def _outputs(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return run_constant_model({f"out{i}": a for i, a in enumerate(arrays)}, SIZE)


def _assert_frame(got: FrameBoxes, want: list[Obj]) -> None:
    order = np.argsort(-got.scores, kind="stable")
    assert got.class_ids[order].tolist() == [o.cls for o in want]
    np.testing.assert_allclose(got.scores[order], [o.score for o in want], atol=1e-5)
    np.testing.assert_allclose(got.boxes[order], [o.xyxy for o in want], atol=2e-3)
    assert got.boxes.dtype == np.float32 and got.class_ids.dtype == np.int32


def _decode(layout: DetectLayout, arrays: list[np.ndarray], lb: Letterbox) -> FrameBoxes:
    (res,) = decode_detections(layout, _outputs(arrays), [lb], TH)
    return res


def test_every_manifest_layout_has_a_decoder() -> None:
    from strata.shared.models.manifest import DETECT_FORMATS

    assert set(DECODERS) == set(DETECT_FORMATS)


@pytest.mark.parametrize("resize", RESIZES)
def test_yolov8(resize: str) -> None:
    lb = _lb(resize)
    res = _decode(DetectLayout("yolov8", C, SIZE), encode_yolov8(lb, OBJS, C), lb)
    _assert_frame(res, [A, B])


@pytest.mark.parametrize("resize", RESIZES)
def test_yolov5_objectness_times_class_score(resize: str) -> None:
    lb = _lb(resize)
    res = _decode(DetectLayout("yolov5", C, SIZE), encode_yolov5(lb, OBJS, C), lb)
    _assert_frame(res, [A, B])


@pytest.mark.parametrize("resize", RESIZES)
def test_yolox_grid_offsets(resize: str) -> None:
    lb = _lb(resize)
    res = _decode(DetectLayout("yolox", C, SIZE), encode_yolox(lb, OBJS, C), lb)
    _assert_frame(res, [A, B])


def test_yolox_other_strides_and_a_non_multiple_size() -> None:
    lb = plan_letterbox(160, 120, 72, "letterbox_topleft")  # 72 / 16 = 4.5: grids of ceil
    layout = DetectLayout("yolox", C, 72, strides=(16, 32))
    arrays = encode_yolox(lb, [A, B, LOW], C, strides=(16, 32))
    assert arrays[0].shape[1] == 5 * 5 + 3 * 3
    out = run_constant_model({"o": arrays[0]}, 72)
    (res,) = decode_detections(layout, out, [lb], TH)
    _assert_frame(res, [A, B])


@pytest.mark.parametrize("resize", RESIZES)
def test_gfl_picodet(resize: str) -> None:
    lb = _lb(resize)
    layout = DetectLayout("gfl", C, SIZE)
    arrays = encode_gfl(lb, OBJS, layout)
    assert [a.shape[1] for a in arrays] == [64, 16, 4, 1] * 2
    _assert_frame(_decode(layout, arrays, lb), [A, B])


@pytest.mark.parametrize("resize", RESIZES)
def test_gfl_nanodet_batchless_maps_paired_by_shape_not_order(resize: str) -> None:
    lb = _lb(resize)
    layout = DetectLayout("gfl", C, SIZE, strides=(8, 16, 32), grid_centre="nanodet")
    cls0, cls1, cls2, box0, box1, box2 = (a[0] for a in encode_gfl(lb, OBJS, layout))
    # NanoDet's names lie: the outputs come in an order that says nothing of their level.
    arrays = [cls2, box1, cls0, box2, box0, cls1]
    _assert_frame(_decode(layout, arrays, lb), [A, B])


def test_gfl_centre_convention_matters() -> None:
    lb = _lb("stretch")
    nanodet = DetectLayout("gfl", C, SIZE, strides=(8, 16, 32), grid_centre="nanodet")
    arrays = encode_gfl(lb, [A], nanodet)
    res = _decode(DetectLayout("gfl", C, SIZE, strides=(8, 16, 32)), arrays, lb)
    # Half-cell centres sit half a pixel of the input further on.
    shift = 0.5 / np.array([lb.scale, lb.scale_y, lb.scale, lb.scale_y])
    np.testing.assert_allclose(res.boxes[0], np.array(A.xyxy) + shift, atol=2e-3)


@pytest.mark.parametrize("resize", RESIZES)
def test_end2end_yolov10(resize: str) -> None:
    lb = _lb(resize)
    odd = Obj((1.0, 1.0, 5.0, 5.0), 7, 0.95)  # a class the labels do not have: dropped
    res = _decode(DetectLayout("end2end", C, SIZE), encode_end2end(lb, [*OBJS, odd]), lb)
    _assert_frame(res, [A, B, DUP])  # no NMS: the graph did it


def test_end2end_out_of_range_class_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    lb = _lb("letterbox")
    arrays = encode_end2end(lb, [A, Obj((1.0, 1.0, 5.0, 5.0), 7, 0.95)])
    layout = DetectLayout("end2end", C, SIZE)
    from strata.shared.vision import layouts

    layouts._warned.discard("end2end")
    with caplog.at_level(logging.WARNING, logger="strata.shared.vision.layouts"):
        _decode(layout, arrays, lb)
        _decode(layout, arrays, lb)
    warned = [r for r in caplog.records if "class_offset" in r.getMessage()]
    assert len(warned) == 1 and "[7]" in warned[0].getMessage()


@pytest.mark.parametrize("resize", RESIZES)
def test_end2end_paddle_rows_and_counts_by_frame(resize: str) -> None:
    lbs = [_lb(resize), _lb(resize, 120, 160)]
    other = Obj((10.0, 20.0, 50.0, 80.0), 2, 0.7)
    background = Obj((60.0, 60.0, 70.0, 70.0), -1, 0.9)  # class 0 with offset 1: dropped
    arrays = encode_paddle(lbs, [[A, B, LOW], [other, background]], offset=1)
    layout = DetectLayout("end2end", C, SIZE, class_offset=1)
    out = _outputs(arrays)
    first, second = decode_detections(layout, out, lbs, TH)
    _assert_frame(first, [A, B])
    _assert_frame(second, [other])


def test_end2end_paddle_one_frame_count_over_its_rows() -> None:
    # Paddle2ONNX counts the boxes before keep_top_k: one frame's rows are all there are.
    lb = _lb("stretch")
    rows, _count = encode_paddle([lb], [[A, B]])
    (res,) = decode_detections(
        DetectLayout("end2end", C, SIZE), [rows, np.array([2125], np.int32)], [lb], TH
    )
    _assert_frame(res, [A, B])
    with pytest.raises(LayoutError, match="a frame at a time"):
        decode_detections(
            DetectLayout("end2end", C, SIZE), [rows, np.array([2, 5], np.int32)], [lb, lb], TH
        )


@pytest.mark.parametrize("resize", RESIZES)
@pytest.mark.parametrize("single", [False, True])
def test_detr(resize: str, single: bool) -> None:
    lb = _lb(resize)
    res = _decode(DetectLayout("detr", C, SIZE), encode_detr(lb, OBJS, C, single), lb)
    _assert_frame(res, [A, B, DUP])


def test_detr_keeps_the_top_max_detections() -> None:
    lb = _lb("letterbox")
    out = _outputs(encode_detr(lb, OBJS, C, single=False))
    (res,) = decode_detections(DetectLayout("detr", C, SIZE), out, [lb], Thresholds(0.25, 0.45, 2))
    _assert_frame(res, [A, B])


def test_detr_boxes_found_by_shape_when_listed_second() -> None:
    lb = _lb("letterbox")
    boxes, logits = encode_detr(lb, OBJS, C, single=False)
    _assert_frame(_decode(DetectLayout("detr", C, SIZE), [logits, boxes], lb), [A, B, DUP])


@pytest.mark.parametrize("resize", RESIZES)
def test_ssd(resize: str) -> None:
    lb = _lb(resize)
    res = _decode(DetectLayout("ssd", C, SIZE, class_offset=1), encode_ssd(lb, OBJS), lb)
    _assert_frame(res, [A, B, DUP])


def test_nms_layouts_keep_frames_apart() -> None:
    lbs = [_lb("letterbox"), _lb("letterbox")]
    one = encode_yolov5(lbs[0], [A], C)[0]
    two = encode_yolov5(lbs[1], [B, DUP], C)[0]
    out = run_constant_model({"o": np.concatenate([one, two])}, SIZE, batch=2)
    first, second = decode_detections(DetectLayout("yolov5", C, SIZE), out, lbs, TH)
    _assert_frame(first, [A])
    _assert_frame(second, [B, DUP])  # DUP's overlap with A is in the other frame


def test_no_candidate_gives_empty_frames() -> None:
    lb = _lb("letterbox")
    layout = DetectLayout("gfl", C, SIZE)
    res = _decode(layout, encode_gfl(lb, [LOW], layout), lb)
    assert len(res) == 0


# --- bad shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "shapes", "match"),
    [
        ("yolov8", [(1, 4 + 80, 100)], r"\[N, 4 \+ 3, anchors\].*\[1, 84, 100\].*3 labels"),
        ("yolov5", [(1, 100, 85)], r"yolov5 layout: output 0 should be \[N, anchors, 5 \+ 3"),
        ("yolov5", [(1, 100, 8), (1, 2)], r"reads one output.*given 2"),
        ("yolox", [(1, 100, 8)], r"\[N, 84, 5 \+ 3\].*strides 8, 16, 32.*output.strides"),
        ("gfl", [(1, 64, 3)], r"class map .* and a box map .* given 1"),
        ("gfl", [(1, 64, 3), (1, 64, 20)], r"box map \[N, A, 32\] \(4 x \(reg_max 7.*reg_max"),
        ("gfl", [(1, 64, 3), (1, 16, 32)], r"box map of 64 anchors"),
        ("gfl", [(1, 50, 3), (1, 50, 32)], r"ceil\(64 / stride\)\^2.*8: 64.*output.strides"),
        ("gfl", [(1, 64, 3), (1, 64, 3), (1, 16, 32), (1, 64, 32)], r"box map of 64"),
        ("end2end", [(1, 100, 7)], r"\[N, K, 6\] x1, y1, x2, y2, score.*\[1, 100, 7\]"),
        ("end2end", [(100, 6), (1, 1)], r"count of rows a frame \[N\].*\[1, 1\]"),
        ("detr", [(1, 300, 84)], r"\[N, Q, 4 \+ 3\].*\[1, 300, 84\]"),
        ("detr", [(1, 300, 4), (1, 200, 3)], r"logits \[N, 300, 3\].*\[1, 200, 3\]"),
        ("ssd", [(1, 10, 4), (1, 10), (1, 10)], r"reads boxes .* given 3"),
        ("ssd", [(1, 10, 4), (1, 10), (1, 9), (1,)], r"scores \[N, 10\].*\[1, 9\]"),
        ("nope", [(1, 10, 4)], r"no decoder for output layout 'nope'"),
    ],
)
def test_bad_shapes_say_layout_expected_and_seen(
    fmt: str, shapes: list[tuple[int, ...]], match: str
) -> None:
    with pytest.raises(LayoutError, match=match):
        check_shapes(DetectLayout(fmt, C, SIZE), shapes)


def test_decoders_check_shapes_before_reading() -> None:
    lb = _lb("letterbox")
    with pytest.raises(LayoutError, match=r"yolov5 layout: output 0 should be"):
        decode_detections(DetectLayout("yolov5", 80, SIZE), encode_yolov5(lb, [A], C), [lb], TH)
    with pytest.raises(LayoutError, match=r"holds 1 frame\(s\), the batch has 2"):
        decode_detections(DetectLayout("yolov5", C, SIZE), encode_yolov5(lb, [A], C), [lb, lb], TH)


def test_check_shapes_names_outputs_and_accepts_dynamic_axes() -> None:
    layout = DetectLayout("gfl", C, SIZE)
    check_shapes(layout, [(None, None, 3), (None, None, 32)])
    with pytest.raises(LayoutError, match=r"output 'scores'"):
        check_shapes(layout, [(None, None, 5), (None, None, 32)], ["scores", "boxes"])
