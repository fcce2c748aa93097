"""Which output layout a detector or classifier has, read from its outputs' shapes.

The rules (N: batch, A: anchors, C: classes, K: kept boxes, Q: queries; a leading N may be
missing where noted). Where two layouts give the same shapes the import refuses and asks
for `--format`, which also overrides every rule:

- one [N, 4 + C, A] with A > 4 + C                         -> yolov8
- one [N, A, 5 + C] with A > 5 + C (A > 1000 when 5 + C = 6) -> yolov5 or yolox: ambiguous
  (the same shape, raw grid offsets or pixels): refused unless --format; the hint says yolox
  when the file's name or metadata says YOLOX
- one [N, K, 6] with K <= 1000                              -> end2end (x1, y1, x2, y2,
  score, class: YOLOv10, YOLO26)
- two: [K, 6] and a count [N]                               -> end2end (Paddle, NMS inside)
- 2k outputs, k class maps [(N,) A, C] and k box maps [(N,) A, 4 x (reg_max + 1)] pairing
  level by level on A                                       -> gfl (reg_max from the box
  maps; the class maps are those as wide as the labels' count where one is)
- boxes [N, Q, 4] and logits [N, Q, C]                      -> detr
- four: boxes [N, K, 4], classes [N, K], scores [N, K], count [N] -> ssd
- one [N, C]                                                -> logits, or probabilities
  when the graph's last operator is a Softmax
Anything else is refused with the list of layouts and the --format flag.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from strata.shared.models.manifest import DETECT_FORMATS, OutputFormat

LAYOUTS = (*DETECT_FORMATS, "logits", "probabilities")
MAX_SELECTED = 1000  # [N, K, 6] with more rows than this reads as anchors, not kept boxes


class ImportRefusedError(ValueError):
    """The file is not something the tiers can run; the message says why."""


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int | None, ...]: ...


@dataclass(frozen=True, slots=True)
class Layout:
    """What the outputs are: format, classes (None: only the labels can say), outputs."""

    format: OutputFormat
    classes: int | None
    name: str
    names: tuple[str, ...] = ()  # every output the decoder reads, where more than one
    reg_max: int = 7
    strides: tuple[int, ...] = ()

    @property
    def task(self) -> str:
        """detect or classify."""
        return "classify" if self.format in ("logits", "probabilities") else "detect"


@dataclass(frozen=True, slots=True)
class Hints:
    """What else the file says: its name and metadata text, the Softmax, the labels."""

    text: str  # file name and metadata values, lower case
    softmax: frozenset[str]  # outputs produced by a Softmax
    labels: int | None  # how many labels were given (--labels or metadata)
    hw: tuple[int, int]  # the input's height and width


def fmt(shape: Sequence[int | None]) -> str:
    """[N, 3, 416, 416] with N for a dynamic axis."""
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


def _describe(outs: Sequence[_Tensor]) -> str:
    return ", ".join(f"{t.name} {fmt(t.shape)}" for t in outs)


def unknown(outs: Sequence[_Tensor], why: str = "") -> ImportRefusedError:
    """The refusal for outputs no rule reads."""
    reason = f"{why}; " if why else ""
    return ImportRefusedError(
        f"outputs {_describe(outs)}: {reason}no known layout reads them (layouts: "
        f"{', '.join(LAYOUTS)}); if the model is one of these, give --format LAYOUT"
    )


def infer(outs: Sequence[_Tensor], hints: Hints, wanted: OutputFormat | None) -> Layout:
    """The layout of outputs `outs`: `wanted` checked against the shapes, else inferred."""
    if wanted is not None:
        found = _READERS[wanted](outs, hints)
        if isinstance(found, str):
            raise ImportRefusedError(
                f"--format {wanted}: outputs {_describe(outs)} do not fit: {found}"
            )
        return found
    ambiguous = _ambiguous(outs, hints)
    if ambiguous:
        raise ImportRefusedError(ambiguous)
    for reader in (_classify, _yolov8, _end2end, _detr_pair, _gfl, _ssd):
        found = reader(outs, hints)
        if not isinstance(found, str):
            return found
    raise unknown(outs)


def _ambiguous(outs: Sequence[_Tensor], hints: Hints) -> str:
    """The refusal text when the shapes fit yolov5 and yolox alike, else ''."""
    if isinstance(_yolov5(outs, hints), str):
        return ""
    y = outs[0]
    if y.shape[2] == 6 and y.shape[1] is not None and y.shape[1] <= MAX_SELECTED:
        return ""  # [N, K, 6] of few rows: kept boxes (end2end)
    hint = (
        "the file says YOLOX: --format yolox"
        if "yolox" in hints.text
        else "--format yolox for YOLOX's release export (raw grid offsets, strides 8, 16, 32), "
        "--format yolov5 for YOLOv5/v7 (boxes in input pixels)"
    )
    return (
        f"output {y.name!r} is {fmt(y.shape)}: [N, anchors, 5 + classes] is the layout of "
        f"both yolov5 and yolox; say which: {hint}"
    )


def _one3(outs: Sequence[_Tensor]) -> tuple[int | None, int | None] | str:
    if len(outs) != 1 or len(outs[0].shape) != 3:
        return "wants one output of rank 3"
    return outs[0].shape[1], outs[0].shape[2]


def _yolov8(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    dims = _one3(outs)
    if isinstance(dims, str):
        return dims
    rows, anchors = dims
    if rows is None or rows < 5 or (anchors is not None and anchors <= rows):
        return "wants [N, 4 + classes, anchors] with more anchors than rows"
    return Layout("yolov8", rows - 4, outs[0].name)


def _yolov5(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    dims = _one3(outs)
    if isinstance(dims, str):
        return dims
    anchors, rows = dims
    if rows is None or rows < 6 or (anchors is not None and anchors <= rows):
        return "wants [N, anchors, 5 + classes] with more anchors than columns"
    return Layout("yolov5", rows - 5, outs[0].name)


def _yolox(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    found = _yolov5(outs, hints)
    if isinstance(found, str):
        return found
    anchors = outs[0].shape[1]
    h, w = hints.hw
    for strides in ((8, 16, 32), (8, 16, 32, 64)):
        if anchors is None or anchors == sum(math.ceil(h / s) * math.ceil(w / s) for s in strides):
            return Layout("yolox", found.classes, found.name, strides=strides)
    return f"{anchors} anchors are not the grids of strides 8, 16, 32 (or to 64) at {h}x{w}"


def _end2end(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    if len(outs) == 1:
        dims = _one3(outs)
        if isinstance(dims, str) or dims[1] != 6:
            return "wants one [N, K, 6] output, or Paddle's [K, 6] and a count"
        return Layout("end2end", None, outs[0].name)
    if len(outs) == 2:
        rows = [t for t in outs if len(t.shape) == 2 and t.shape[1] == 6]
        count = [t for t in outs if len(t.shape) == 1]
        if rows and count:
            names = (rows[0].name, count[0].name)
            return Layout("end2end", None, rows[0].name, names=names)
    return "wants one [N, K, 6] output, or Paddle's [K, 6] rows and a count [N]"


def _gfl(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    if len(outs) < 2 or len(outs) % 2 or any(len(t.shape) not in (2, 3) for t in outs):
        return "wants a class map [N, A, C] and a box map [N, A, 4 x (reg_max + 1)] a level"
    widths = sorted({t.shape[-1] for t in outs}, key=lambda d: -1 if d is None else d)
    if len(widths) != 2 or None in widths:
        return "wants two widths: classes and 4 x (reg_max + 1) DFL bins"
    boxes = [d for d in widths if d is not None and d % 4 == 0 and 2 <= d // 4 <= 65]
    if hints.labels in widths:  # the labels' count names the class maps
        boxes = [d for d in boxes if d != hints.labels]
    if len(boxes) != 1:
        return f"cannot tell the class maps from the box maps by width ({widths})"
    bins = boxes[0]
    cls = [t for t in outs if t.shape[-1] != bins]
    box = [t for t in outs if t.shape[-1] == bins]
    if sorted(t.shape[-2] or 0 for t in cls) != sorted(t.shape[-2] or 0 for t in box):
        return "the class and box maps do not pair level by level on their anchors"
    classes = cls[0].shape[-1]
    strides = _strides([t.shape[-2] for t in cls], hints.hw)
    names = tuple(t.name for t in outs)
    return Layout("gfl", classes, outs[0].name, names, bins // 4 - 1, strides)


def _strides(anchors: Sequence[int | None], hw: tuple[int, int]) -> tuple[int, ...]:
    """Each level's stride, finest first, where every anchor count is a grid of the input."""
    h, w = hw
    found = []
    for a in anchors:
        s = next((s for s in (8, 16, 32, 64, 128) if math.ceil(h / s) * math.ceil(w / s) == a), 0)
        if not s:
            return ()  # the decoder's usual strides, and its check says what disagrees
        found.append(s)
    return tuple(sorted(found))


def _detr(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    """--format detr: boxes and logits, or one [N, Q, 4 + C] tensor."""
    if len(outs) == 1 and len(outs[0].shape) == 3 and (outs[0].shape[2] or 0) > 4:
        return Layout("detr", (outs[0].shape[2] or 0) - 4, outs[0].name)
    return _detr_pair(outs, hints)


def _detr_pair(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    """Boxes [N, Q, 4] and logits [N, Q, C] (one tensor of both is yolov5's shape)."""
    if len(outs) != 2 or any(len(t.shape) != 3 for t in outs):
        return "wants boxes [N, Q, 4] and logits [N, Q, C] (or one [N, Q, 4 + C])"
    boxes = [t for t in outs if t.shape[2] == 4]
    logits = [t for t in outs if t.shape[2] != 4] or boxes[1:]
    if not boxes or not logits or boxes[0].shape[1] != logits[0].shape[1]:
        return "wants boxes [N, Q, 4] and logits [N, Q, C] with the same Q"
    return Layout("detr", logits[0].shape[2], boxes[0].name, tuple(t.name for t in outs))


def _ssd(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    if len(outs) != 4:
        return "wants four outputs: boxes [N, K, 4], classes [N, K], scores [N, K], count [N]"
    boxes = [t for t in outs if len(t.shape) == 3 and t.shape[2] == 4]
    pairs = [t for t in outs if len(t.shape) == 2]
    count = [t for t in outs if len(t.shape) == 1]
    if len(boxes) != 1 or len(pairs) != 2 or len(count) != 1:
        return "wants boxes [N, K, 4], classes [N, K], scores [N, K], count [N]"
    # Classes before scores, as TensorFlow's post-processing writes them, unless named.
    if "score" in pairs[0].name.lower() or "class" in pairs[1].name.lower():
        pairs.reverse()
    names = (boxes[0].name, pairs[0].name, pairs[1].name, count[0].name)
    return Layout("ssd", None, boxes[0].name, names)


def _classify(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
    if len(outs) != 1 or len(outs[0].shape) != 2:
        return "wants one [N, classes] output"
    y = outs[0]
    if y.shape[1] is None:
        return f"output {y.name!r} is {fmt(y.shape)}: the class axis is dynamic"
    fmt_: OutputFormat = "probabilities" if y.name in hints.softmax else "logits"
    return Layout(fmt_, y.shape[1], y.name)


def _as(format_: OutputFormat) -> _Reader:
    def read(outs: Sequence[_Tensor], hints: Hints) -> Layout | str:
        found = _classify(outs, hints)
        return found if isinstance(found, str) else Layout(format_, found.classes, found.name)

    return read


class _Reader(Protocol):
    def __call__(self, outs: Sequence[_Tensor], hints: Hints, /) -> Layout | str: ...


_READERS: dict[str, _Reader] = {
    "yolov8": _yolov8,
    "yolov5": _yolov5,
    "yolox": _yolox,
    "gfl": _gfl,
    "end2end": _end2end,
    "detr": _detr,
    "ssd": _ssd,
    "logits": _as("logits"),
    "probabilities": _as("probabilities"),
}
