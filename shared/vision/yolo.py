"""Decoding of ultralytics YOLOv8/11 detection output: [N, 4 + classes, anchors].

Rows 0-3 are cx, cy, w, h in model-input pixels, the rest per-class scores (already
sigmoid-ed, no objectness). Score filtering is vectorized over the whole batch; class-aware
NMS is OpenCV's batched NMS; boxes come back in the original frame's pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .boxes import EMPTY, FrameBoxes
from .letterbox import Letterbox
from .nms import Candidates, Thresholds, nms_frames

COCO80: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip


def decode_yolo(
    output: np.ndarray,
    letterboxes: Sequence[Letterbox],
    score_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    max_detections: int = 300,
) -> list[FrameBoxes]:
    """Per-frame detections for the first len(letterboxes) rows of `output`."""
    n = len(letterboxes)
    if output.ndim != 3 or output.shape[1] < 5:
        raise ValueError(f"expected YOLO output [N, 4+classes, anchors], got {output.shape}")
    out = output[:n]
    cls_scores = out[:, 4:, :]
    best = cls_scores.max(axis=1)  # (n, anchors)
    keep_n, keep_a = np.nonzero(best > score_threshold)
    if keep_n.size == 0:
        return [EMPTY] * n
    scores_all = best[keep_n, keep_a].astype(np.float32)
    classes_all = cls_scores[keep_n, :, keep_a].argmax(axis=1).astype(np.int32)
    xywh = out[keep_n, :4, keep_a].astype(np.float32)  # (k, 4) cx, cy, w, h
    # cv2 NMS wants x, y, w, h (top-left); keep cx,cy,w,h -> x1,y1,w,h in place.
    xywh[:, 0] -= xywh[:, 2] * 0.5
    xywh[:, 1] -= xywh[:, 3] * 0.5
    th = Thresholds(score_threshold, iou_threshold, max_detections)
    return nms_frames(Candidates(keep_n, xywh, scores_all, classes_all), letterboxes, th)
