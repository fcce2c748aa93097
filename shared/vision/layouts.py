"""Detector output layouts: one decoder each, all ending in boxes in the original frame.

A layout (`DetectLayout.format`, the manifest's `output.format`) says how a detector's
outputs hold its boxes; the formats are described in shared/models/manifest.py. Every
decoder takes the outputs in the manifest's order (`output.names`), the placements of the
batch's frames, and the thresholds, and returns one `FrameBoxes` per frame with boxes in
the frame's pixels, scores and class ids. Layouts without NMS in the graph get OpenCV's
class-aware NMS, per frame; the others (end2end, detr, ssd) are only filtered by score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .boxes import FrameBoxes
from .letterbox import Letterbox
from .yolo import decode_yolo


class LayoutError(ValueError):
    """The outputs do not have the shapes the layout describes."""


@dataclass(frozen=True, slots=True)
class DetectLayout:
    """How to read one detector's outputs (built from its manifest)."""

    format: str
    num_classes: int
    input_size: int
    strides: tuple[int, ...] = ()
    reg_max: int = 7
    grid_centre: str = "half_cell"
    class_offset: int = 0


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What a detection must reach to be kept, and NMS."""

    score: float = 0.25
    iou: float = 0.45
    max_detections: int = 300


Decoder = Callable[
    [DetectLayout, Sequence[np.ndarray], Sequence[Letterbox], Thresholds], list[FrameBoxes]
]


def _yolov8(
    layout: DetectLayout,
    outputs: Sequence[np.ndarray],
    letterboxes: Sequence[Letterbox],
    th: Thresholds,
) -> list[FrameBoxes]:
    return decode_yolo(outputs[0], letterboxes, th.score, th.iou, th.max_detections)


DECODERS: dict[str, Decoder] = {"yolov8": _yolov8}


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


__all__ = ["DECODERS", "DetectLayout", "LayoutError", "Thresholds", "decode_detections"]
