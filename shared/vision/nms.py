"""The step every NMS-less detector layout ends with: class-aware NMS per frame, then the
kept boxes mapped back to their frame's pixels.

Decoders hand in the candidates of a whole batch (already over the score threshold), in
frame order, as x, y, w, h in model-input pixels: what OpenCV's batched NMS takes, so the
array is passed without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .boxes import EMPTY, FrameBoxes
from .letterbox import Letterbox

# Most candidates per image handed to NMS (as ultralytics' max_nms).
MAX_NMS = 30000


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What a detection must reach to be kept, and NMS."""

    score: float = 0.25
    iou: float = 0.45
    max_detections: int = 300


@dataclass(frozen=True, slots=True)
class Candidates:
    """A batch's boxes over the score threshold, in frame order.

    `frame_of` (k,) is each candidate's frame, ascending; `xywh` (k, 4) float32 holds
    x1, y1, w, h in model-input pixels; `scores` (k,) float32 and `classes` (k,) int32."""

    frame_of: np.ndarray
    xywh: np.ndarray
    scores: np.ndarray
    classes: np.ndarray


def _any(a: np.ndarray) -> Any:
    # OpenCV's stubs say Sequence; its binding takes numpy arrays without a copy.
    return cast(Any, a)


def nms_frames(
    cands: Candidates, letterboxes: Sequence[Letterbox], th: Thresholds
) -> list[FrameBoxes]:
    """Per-frame detections: class-aware NMS, at most `th.max_detections` a frame, boxes
    x1, y1, x2, y2 in the frame's pixels (`cands.xywh`'s kept rows are reused for them)."""
    import cv2

    n = len(letterboxes)
    if cands.frame_of.size == 0:
        return [EMPTY] * n
    xywh, scores, classes = cands.xywh, cands.scores, cands.classes
    bounds = np.searchsorted(cands.frame_of, np.arange(n + 1))
    results: list[FrameBoxes] = []
    for i in range(n):  # per frame (not per box): NMS must not mix frames
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo == hi:
            results.append(EMPTY)
            continue
        boxes, sc, cls = xywh[lo:hi], scores[lo:hi], classes[lo:hi]
        if boxes.shape[0] > MAX_NMS:
            top = np.argpartition(-sc, MAX_NMS)[:MAX_NMS]
            boxes, sc, cls = boxes[top], sc[top], cls[top]
        idx = np.asarray(
            cv2.dnn.NMSBoxesBatched(_any(boxes), _any(sc), _any(cls), th.score, th.iou),
            dtype=np.int64,
        ).reshape(-1)[: th.max_detections]
        kept = boxes[idx]
        kept[:, 2:] += kept[:, :2]  # x1,y1,w,h -> x1,y1,x2,y2
        letterboxes[i].to_original(kept)
        results.append(FrameBoxes(kept, sc[idx], cls[idx]))
    return results


__all__ = ["MAX_NMS", "Candidates", "Thresholds", "nms_frames"]
