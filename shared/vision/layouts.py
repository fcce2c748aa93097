"""Detector output layouts: one decoder each, all ending in boxes in the original frame.

A layout (`DetectLayout.format`, the manifest's `output.format`) says how a detector's
outputs hold its boxes; the formats are described in shared/models/manifest.py. Every
decoder takes the outputs in the manifest's order (`output.names`), the placements of the
batch's frames, and the thresholds, and returns one `FrameBoxes` per frame with boxes in
the frame's pixels, scores and class ids.

Layouts without NMS in the graph (yolov8, yolov5, yolox, gfl) keep the candidates over the
score threshold and get OpenCV's class-aware NMS per frame (nms.py, shared by all four).
The others (end2end, detr, ssd) hold boxes already selected: they are only filtered by
score, `class_offset` is subtracted from their class ids and ids outside [0, classes) are
dropped (logged once a layout: a wrong `class_offset` or label list is the usual cause).

`check_shapes` holds each layout's rule for its output shapes; the decoders and the model
repository's `check_io` both use it, so a model is refused before its first frame for the
same reason a batch would be.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .boxes import EMPTY, FrameBoxes
from .letterbox import Letterbox
from .nms import Candidates, Thresholds, nms_frames
from .yolo import decode_yolo

log = logging.getLogger(__name__)

Shape = tuple[int | None, ...]

# The levels a layout has when the manifest names none.
DEFAULT_STRIDES: dict[str, tuple[int, ...]] = {"gfl": (8, 16, 32, 64), "yolox": (8, 16, 32)}


class LayoutError(ValueError):
    """The outputs do not have the shapes the layout describes."""


@dataclass(frozen=True, slots=True)
class DetectLayout:
    """How to read one detector's outputs (built from its manifest).

    `input_size` is the square input's side in pixels (0: unknown, as for a model with a
    dynamic input, whose anchor counts then go unchecked)."""

    format: str
    num_classes: int
    input_size: int
    strides: tuple[int, ...] = ()
    reg_max: int = 7
    grid_centre: str = "half_cell"
    class_offset: int = 0

    @property
    def level_strides(self) -> tuple[int, ...]:
        """The strides of the levels: the manifest's, else the layout's usual ones."""
        return self.strides or DEFAULT_STRIDES.get(self.format, ())


Decoder = Callable[
    [DetectLayout, Sequence[np.ndarray], Sequence[Letterbox], Thresholds], list[FrameBoxes]
]


# --- shapes -------------------------------------------------------------------------------


def _fmt(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _fits(shape: Shape, want: Shape) -> bool:
    """Same rank, and every axis equal where both are known."""
    return len(shape) == len(want) and all(
        g is None or w is None or g == w for g, w in zip(shape, want, strict=True)
    )


class _Namer:
    """Names outputs in messages: the model's names when known, else their positions."""

    def __init__(self, layout: DetectLayout, names: Sequence[str]) -> None:
        self.layout = layout
        self.names = names

    def __call__(self, i: int) -> str:
        return f"output {self.names[i]!r}" if i < len(self.names) else f"output {i}"

    def error(self, i: int, shape: Shape, expected: str, fix: str = "") -> LayoutError:
        fix = fix or "check output.format and labels in the manifest"
        return LayoutError(
            f"{self.layout.format} layout: {self(i)} should be {expected}, "
            f"the model gives {_fmt(shape)}; {fix}"
        )

    def expect(self, i: int, shape: Shape, want: Shape, expected: str, fix: str = "") -> None:
        if not _fits(shape, want):
            raise self.error(i, shape, expected, fix)

    def count(self, shapes: Sequence[Shape], allowed: tuple[int, ...], expected: str) -> None:
        if len(shapes) not in allowed:
            raise LayoutError(
                f"{self.layout.format} layout reads {expected}, it was given "
                f"{len(shapes)} output(s) {', '.join(_fmt(s) for s in shapes)}; list the "
                "outputs the layout reads, in that order, in the manifest's output.names"
            )


def _labels_fix(layout: DetectLayout) -> str:
    return (
        f"the manifest has {layout.num_classes} labels: give one label per model class "
        "(or pick the output.format that matches the model)"
    )


def _check_yolov8(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    c = layout.num_classes
    name.count(shapes, (1,), "one output [N, 4 + classes, anchors]")
    name.expect(0, shapes[0], (None, 4 + c, None), f"[N, 4 + {c}, anchors]", _labels_fix(layout))


def _yolox_anchors(layout: DetectLayout) -> int:
    return sum(math.ceil(layout.input_size / s) ** 2 for s in layout.level_strides)


def _check_yolov5(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    c = layout.num_classes
    name.count(shapes, (1,), "one output [N, anchors, 5 + classes]")
    name.expect(0, shapes[0], (None, None, 5 + c), f"[N, anchors, 5 + {c}]", _labels_fix(layout))
    if layout.format == "yolox" and layout.input_size:
        a = _yolox_anchors(layout)
        strides = ", ".join(map(str, layout.level_strides))
        name.expect(
            0,
            shapes[0],
            (None, a, 5 + c),
            f"[N, {a}, 5 + {c}] (the grids of strides {strides} at {layout.input_size} px)",
            "set output.strides to the model's strides",
        )


def _check_end2end(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    name.count(shapes, (1, 2), "[N, K, 6], or Paddle's [K, 6] rows and their count")
    if len(shapes) == 1:
        name.expect(0, shapes[0], (None, None, 6), "[N, K, 6] x1, y1, x2, y2, score, class")
        return
    name.expect(0, shapes[0], (None, 6), "Paddle's [K, 6] class, score, x1, y1, x2, y2 rows")
    name.expect(1, shapes[1], (None,), "the count of rows a frame [N]")


def _detr_order(shapes: Sequence[Shape], c: int) -> tuple[int, int]:
    """(boxes, logits) positions of a two-output DETR: by their last axis, else in order."""
    last = [s[-1] if s else None for s in shapes]
    if c != 4 and last[1] == 4 and last[0] != 4:
        return 1, 0
    return 0, 1


def _check_detr(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    c = layout.num_classes
    name.count(shapes, (1, 2), "[N, Q, 4 + classes], or boxes [N, Q, 4] and logits [N, Q, C]")
    if len(shapes) == 1:
        name.expect(0, shapes[0], (None, None, 4 + c), f"[N, Q, 4 + {c}]", _labels_fix(layout))
        return
    b, s = _detr_order(shapes, c)
    name.expect(b, shapes[b], (None, None, 4), "boxes [N, Q, 4] cx, cy, w, h (normalised)")
    q = shapes[b][1]
    name.expect(
        s, shapes[s], (None, q, c), f"class logits [N, {q or 'Q'}, {c}]", _labels_fix(layout)
    )


def _check_ssd(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    name.count(shapes, (4,), "boxes [N, K, 4], classes [N, K], scores [N, K], count [N]")
    name.expect(0, shapes[0], (None, None, 4), "boxes [N, K, 4] y1, x1, y2, x2 (normalised)")
    k = shapes[0][1]
    for i, what in ((1, "classes"), (2, "scores")):
        name.expect(i, shapes[i], (None, k), f"{what} [N, {k or 'K'}]")
    name.expect(3, shapes[3], (None,), "the count of boxes a frame [N]")


@dataclass(frozen=True, slots=True)
class _GflLevels:
    """Which outputs are a GFL head's class and box maps, level by level (finest first)."""

    cls: tuple[int, ...]
    box: tuple[int, ...]
    strides: tuple[int, ...]  # 0 where the anchor count is unknown


def _gfl_split(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> list[list[int]]:
    """The positions of the class maps and of the box maps, by their last axis."""
    c, bins = layout.num_classes, 4 * (layout.reg_max + 1)
    if len(shapes) < 2 or len(shapes) % 2:
        raise LayoutError(
            f"gfl layout reads a class map [N, A, {c}] and a box map [N, A, {bins}] a level, "
            f"it was given {len(shapes)} output(s) {', '.join(_fmt(s) for s in shapes)}; "
            "list both maps of every level in the manifest's output.names"
        )
    for i, s in enumerate(shapes):
        if len(s) not in (2, 3) or s[-1] not in (None, c, bins):
            raise name.error(
                i,
                s,
                f"a class map [N, A, {c}] or a box map [N, A, {bins}] "
                f"(4 x (reg_max {layout.reg_max} + 1) DFL bins)",
                f"{_labels_fix(layout)}, and output.reg_max to the model's",
            )
    if c == bins:  # the last axis cannot tell them apart: class maps first, as exported
        half = len(shapes) // 2
        return [list(range(half)), list(range(half, len(shapes)))]
    return [
        [i for i, s in enumerate(shapes) if s[-1] == c],
        [i for i, s in enumerate(shapes) if s[-1] != c],
    ]


def _gfl_levels(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> _GflLevels:
    cls, box = _gfl_split(layout, shapes, name)
    if len(cls) != len(box):
        raise LayoutError(
            f"gfl layout: {len(cls)} class maps but {len(box)} box maps in "
            f"{', '.join(_fmt(s) for s in shapes)}; list every level's two outputs in output.names"
        )
    anchors = [shapes[i][-2] for i in cls]
    if all(a is not None for a in anchors):  # finest level first, whatever the names say
        cls.sort(key=lambda i: -(shapes[i][-2] or 0))
        box.sort(key=lambda i: -(shapes[i][-2] or 0))
    strides: list[int] = []
    for ci, bi in zip(cls, box, strict=True):
        a, ab = shapes[ci][-2], shapes[bi][-2]
        if a is not None and ab is not None and a != ab:
            raise name.error(
                bi, shapes[bi], f"a box map of {a} anchors, as {name(ci)} {_fmt(shapes[ci])}"
            )
        strides.append(_gfl_stride(layout, a, name, ci, shapes[ci]))
    return _GflLevels(tuple(cls), tuple(box), tuple(strides))


def _gfl_stride(
    layout: DetectLayout, anchors: int | None, name: _Namer, i: int, shape: Shape
) -> int:
    if anchors is None or not layout.input_size:
        return 0
    size = layout.input_size
    for s in layout.level_strides:
        if math.ceil(size / s) ** 2 == anchors:
            return s
    grids = ", ".join(f"{s}: {math.ceil(size / s) ** 2}" for s in layout.level_strides)
    raise name.error(
        i,
        shape,
        f"a level of ceil({size} / stride)^2 anchors (stride: anchors {grids})",
        "set output.strides to the model's strides (and the input size to the model's)",
    )


def _check_gfl(layout: DetectLayout, shapes: Sequence[Shape], name: _Namer) -> None:
    _gfl_levels(layout, shapes, name)


_CHECKS: dict[str, Callable[[DetectLayout, Sequence[Shape], _Namer], None]] = {
    "yolov8": _check_yolov8,
    "yolov5": _check_yolov5,
    "yolox": _check_yolov5,
    "gfl": _check_gfl,
    "end2end": _check_end2end,
    "detr": _check_detr,
    "ssd": _check_ssd,
}


def check_shapes(layout: DetectLayout, shapes: Sequence[Shape], names: Sequence[str] = ()) -> None:
    """Raise LayoutError where outputs of these shapes (None: a dynamic axis), in the
    manifest's order, cannot be read as `layout`; the message names the output, what was
    expected and what the model gives, and says what to fix."""
    check = _CHECKS.get(layout.format)
    if check is None:
        raise LayoutError(
            f"no decoder for output layout {layout.format!r} (known: {', '.join(DECODERS)})"
        )
    check(layout, shapes, _Namer(layout, names))


def _checked(layout: DetectLayout, outputs: Sequence[np.ndarray], n: int) -> None:
    _check_batch(layout, tuple(o.shape for o in outputs), n)


@lru_cache(maxsize=64)
def _check_batch(layout: DetectLayout, shapes: tuple[tuple[int, ...], ...], n: int) -> None:
    """The shape checks of one batch's outputs, once per (layout, shapes, batch size): a
    model's shapes repeat batch after batch (an error is not cached: it raises each time)."""
    check_shapes(layout, shapes)
    # A batch-less map (NanoDet's [A, C]) is one frame; the rest have a batch axis first.
    for i, shape in enumerate(shapes):
        frames = 1 if layout.format == "gfl" and len(shape) == 2 else shape[0]
        if frames < n and not (layout.format == "end2end" and len(shape) == 2):
            raise LayoutError(
                f"{layout.format} layout: output {i} {_fmt(shape)} holds {frames} frame(s), "
                f"the batch has {n}; run batches the model's size (its input's first axis)"
            )


# --- decoders with NMS --------------------------------------------------------------------


def _yolov8(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    _checked(layout, outputs, len(letterboxes))
    return decode_yolo(outputs[0], letterboxes, th.score, th.iou, th.max_detections)


def _objectness_candidates(
    out: np.ndarray, score: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Frame, anchor, raw box rows (k, 4), score and class of the anchors whose
    objectness x best class score is over `score`, for [n, A, 5 + C] outputs."""
    # Class scores are at most 1, so objectness alone rules most anchors out first.
    keep_n, keep_a = np.nonzero(out[:, :, 4] > score)
    rows = out[keep_n, keep_a]  # (k, 5 + C): a copy of the few candidates only
    joint = rows[:, 5:] * rows[:, 4:5]
    classes = joint.argmax(axis=1)
    scores = joint[np.arange(classes.shape[0]), classes]
    ok = scores > score
    return (
        keep_n[ok],
        keep_a[ok],
        rows[ok, :4].astype(np.float32),
        scores[ok].astype(np.float32),
        classes[ok].astype(np.int32),
    )


def _centre_to_corner(xywh: np.ndarray) -> np.ndarray:
    """cx, cy, w, h -> x1, y1, w, h (what OpenCV's NMS takes), in place."""
    xywh[:, 0] -= xywh[:, 2] * 0.5
    xywh[:, 1] -= xywh[:, 3] * 0.5
    return xywh


def _yolov5(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    n = len(letterboxes)
    _checked(layout, outputs, n)
    frames, _a, xywh, scores, classes = _objectness_candidates(outputs[0][:n], th.score)
    return nms_frames(Candidates(frames, _centre_to_corner(xywh), scores, classes), letterboxes, th)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _grid_cells(size: int, stride: int) -> np.ndarray:
    """The (x, y) cell of each anchor of a level, row by row: (ceil(size / stride)^2, 2)."""
    g = math.ceil(size / stride)
    ys, xs = np.divmod(np.arange(g * g, dtype=np.float32), np.float32(g))
    return np.stack([xs, ys], axis=1)


@lru_cache(maxsize=32)
def _yolox_grid(layout: DetectLayout) -> tuple[np.ndarray, np.ndarray]:
    """Every anchor's grid cell (A, 2) x, y and stride (A, 1), finest level first."""
    cells, strides = [], []
    for s in layout.level_strides:
        cells.append(_grid_cells(layout.input_size, s))
        strides.append(np.full((len(cells[-1]), 1), s, np.float32))
    return _read_only(np.concatenate(cells)), _read_only(np.concatenate(strides))


def _yolox(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    n = len(letterboxes)
    _checked(layout, outputs, n)
    cell, stride = _yolox_grid(layout)
    frames, anchor, xywh, scores, classes = _objectness_candidates(outputs[0][:n], th.score)
    s = stride[anchor]
    xywh[:, :2] += cell[anchor]
    xywh[:, :2] *= s
    np.exp(xywh[:, 2:], out=xywh[:, 2:])
    xywh[:, 2:] *= s
    return nms_frames(Candidates(frames, _centre_to_corner(xywh), scores, classes), letterboxes, th)


@dataclass(frozen=True, slots=True)
class _GflPlan:
    """A GFL head's levels with every anchor's centre, worked out once per output shapes."""

    cls: tuple[int, ...]
    box: tuple[int, ...]
    strides: tuple[int, ...]
    centres: tuple[np.ndarray, ...]  # per level (A, 2) x, y in input pixels


@lru_cache(maxsize=32)
def _gfl_plan(layout: DetectLayout, dims: tuple[tuple[int, ...], ...]) -> _GflPlan:
    levels = _gfl_levels(layout, dims, _Namer(layout, ()))
    centres = []
    for s in levels.strides:
        xy = _grid_cells(layout.input_size, s)
        # PicoDet: the cell's middle; NanoDet's older centre: i * s + (s - 1) / 2.
        xy = xy * s + (s - 1) / 2 if layout.grid_centre == "nanodet" else (xy + 0.5) * s
        centres.append(_read_only(xy.astype(np.float32)))
    return _GflPlan(levels.cls, levels.box, levels.strides, tuple(centres))


def _dfl(logits: np.ndarray, reg_max: int) -> np.ndarray:
    """(k, 4 x (reg_max + 1)) DFL logits -> (k, 4) expected distances, in strides."""
    b = logits.reshape(-1, 4, reg_max + 1).astype(np.float32)  # a copy: exp works in place
    b -= b.max(axis=2, keepdims=True)
    np.exp(b, out=b)
    bins = np.arange(reg_max + 1, dtype=np.float32)
    out: np.ndarray = (b @ bins) / b.sum(axis=2)
    return out


def _gfl(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    n = len(letterboxes)
    _checked(layout, outputs, n)
    plan = _gfl_plan(layout, tuple(tuple(o.shape[-2:]) for o in outputs))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]] = []
    for ci, bi, s, centres in zip(plan.cls, plan.box, plan.strides, plan.centres, strict=True):
        cls, box = outputs[ci], outputs[bi]
        cls = cls[None] if cls.ndim == 2 else cls[:n]  # a batch-less map: one frame
        box = box[None] if box.ndim == 2 else box[:n]
        # Anchors with any class over the score (scores are sigmoid-ed already); the best
        # class only of those: a max over every anchor's classes costs twice the pass.
        kn, ka = np.nonzero((cls > th.score).any(axis=2))
        if kn.size:
            xy = centres[ka]
            picked = cls[kn, ka]
            parts.append((kn, picked.max(axis=1), picked.argmax(axis=1), box[kn, ka], xy, s))
    if not parts:
        return [EMPTY] * n
    frames = np.concatenate([p[0] for p in parts])
    order = np.argsort(frames, kind="stable")  # levels were gathered one after the other
    scores = np.concatenate([p[1] for p in parts])[order].astype(np.float32)
    classes = np.concatenate([p[2] for p in parts])[order].astype(np.int32)
    dist = np.concatenate([_dfl(p[3], layout.reg_max) * np.float32(p[5]) for p in parts])[order]
    xy = np.concatenate([p[4] for p in parts])[order]
    xywh = np.empty((xy.shape[0], 4), np.float32)
    xywh[:, :2] = xy - dist[:, :2]  # left, top
    xywh[:, 2:] = dist[:, :2] + dist[:, 2:]  # left + right, top + bottom
    return nms_frames(Candidates(frames[order], xywh, scores, classes), letterboxes, th)


# --- decoders of boxes already selected ---------------------------------------------------

_warned: set[str] = set()


def _select(
    layout: DetectLayout,
    xyxy: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    letterbox: Letterbox,
    th: Thresholds,
) -> FrameBoxes:
    """One frame's boxes (input pixels) over the score, best first, in the frame's pixels."""
    ids = np.rint(classes).astype(np.int64) - layout.class_offset
    over = scores > th.score
    known = (ids >= 0) & (ids < layout.num_classes)
    if not known[over].all() and layout.format not in _warned:
        _warned.add(layout.format)
        bad = np.unique(ids[over & ~known])[:5].tolist()
        log.warning(
            "%s layout: class ids %s (after class_offset %d) are outside the %d labels; "
            "those boxes are dropped: check output.class_offset and the labels",
            layout.format, bad, layout.class_offset, layout.num_classes,
        )  # fmt: skip
    idx = np.flatnonzero(over & known)
    if idx.size == 0:
        return EMPTY
    idx = idx[np.argsort(-scores[idx], kind="stable")[: th.max_detections]]
    boxes = np.asarray(xyxy[idx], np.float32).copy()
    letterbox.to_original(boxes)
    return FrameBoxes(boxes, scores[idx].astype(np.float32), ids[idx].astype(np.int32))


def _end2end(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    """[N, K, 6] x1, y1, x2, y2, score, class (one output of rank 3: YOLOv10, YOLO26), or
    Paddle's [K, 6] class, score, x1, y1, x2, y2 of every frame one after the other with
    the count of rows a frame ([N]; [1] for one frame) (two outputs, ranks 2 and 1)."""
    n = len(letterboxes)
    _checked(layout, outputs, n)
    if len(outputs) == 1:
        out = outputs[0]
        return [
            _select(layout, out[i, :, :4], out[i, :, 4], out[i, :, 5], lb, th)
            for i, lb in enumerate(letterboxes)
        ]
    rows, count = outputs
    counts = np.asarray(count).reshape(-1).astype(np.int64)[:n]
    if n == 1:
        # Paddle2ONNX's multiclass_nms3 counts the boxes before its keep_top_k (2125 of 100
        # rows on PicoDet-XS): a single frame's rows are all there are.
        counts = np.minimum(counts, rows.shape[0])
    ends = np.cumsum(counts)
    if n and ends[-1] > rows.shape[0]:
        raise LayoutError(
            f"end2end layout: counts {counts.tolist()} add up to more than the "
            f"{rows.shape[0]} rows, so the rows cannot be told apart by frame; "
            "run this model a frame at a time (an input batch of 1)"
        )
    results = []
    for i, lb in enumerate(letterboxes):
        r = rows[ends[i] - counts[i] : ends[i]]
        results.append(_select(layout, r[:, 2:6], r[:, 1], r[:, 0], lb, th))
    return results


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x < -88: sigmoid 0
        out: np.ndarray = 1.0 / (1.0 + np.exp(-x.astype(np.float32)))
    return out


def _detr(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    """Boxes [N, Q, 4] cx, cy, w, h over the input's side and class logits [N, Q, C], or
    one [N, Q, 4 + C]: ultralytics' RT-DETR export, whose class scores are sigmoid-ed in
    the graph (its RTDETRDecoder returns cat(boxes, scores.sigmoid()) when exported)."""
    n = len(letterboxes)
    _checked(layout, outputs, n)
    if len(outputs) == 1:
        boxes, probs = outputs[0][:n, :, :4], outputs[0][:n, :, 4:]
        classes = probs.argmax(axis=2)
        scores = np.take_along_axis(probs, classes[..., None], axis=2)[..., 0]
    else:
        b, s = _detr_order([o.shape for o in outputs], layout.num_classes)
        boxes, logits = outputs[b][:n], outputs[s][:n]
        classes = logits.argmax(axis=2)  # the sigmoid keeps the order: apply it to the best
        scores = _sigmoid(np.take_along_axis(logits, classes[..., None], axis=2)[..., 0])
    xyxy = np.empty(boxes.shape, np.float32)
    half = boxes[..., 2:] * 0.5
    xyxy[..., :2] = boxes[..., :2] - half
    xyxy[..., 2:] = boxes[..., :2] + half
    xyxy *= np.float32(layout.input_size)
    return [
        _select(layout, xyxy[i], scores[i], classes[i], lb, th) for i, lb in enumerate(letterboxes)
    ]


def _ssd(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    """TensorFlow's post-processed boxes [N, K, 4] y1, x1, y2, x2 over the input's side,
    classes [N, K], scores [N, K] and the count of boxes a frame [N]."""
    n = len(letterboxes)
    _checked(layout, outputs, n)
    boxes, classes, scores, count = outputs
    xyxy = boxes[:n][..., [1, 0, 3, 2]].astype(np.float32) * np.float32(layout.input_size)
    counts = np.minimum(np.asarray(count).reshape(-1).astype(np.int64), boxes.shape[1])
    return [
        _select(
            layout, xyxy[i, : counts[i]], scores[i, : counts[i]], classes[i, : counts[i]], lb, th
        )
        for i, lb in enumerate(letterboxes)
    ]


DECODERS: dict[str, Decoder] = {
    "yolov8": _yolov8,
    "yolov5": _yolov5,
    "yolox": _yolox,
    "gfl": _gfl,
    "end2end": _end2end,
    "detr": _detr,
    "ssd": _ssd,
}


def decode_detections(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    thresholds: Thresholds,
) -> list[FrameBoxes]:
    """Per-frame detections for the len(letterboxes) frames of a batch's outputs."""
    decoder = DECODERS.get(layout.format)
    if decoder is None:
        raise LayoutError(
            f"no decoder for output layout {layout.format!r} (known: {', '.join(DECODERS)})"
        )
    return decoder(layout, outputs, letterboxes, thresholds)


__all__ = [
    "DECODERS",
    "DEFAULT_STRIDES",
    "DetectLayout",
    "LayoutError",
    "Thresholds",
    "check_shapes",
    "decode_detections",
]
