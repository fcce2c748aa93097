"""Boxes of one frame and how two sets of boxes overlap: the one IoU every part uses.

Boxes are (N, 4) float32 x1, y1, x2, y2 in a frame's pixels. The edge decoder, the bench's
agreement, model comparison, distillation and trackers all speak this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class FrameBoxes:
    """Detections of one frame: boxes (k, 4) x1,y1,x2,y2 in original pixels, scores, classes."""

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.class_ids.shape[0])

    @classmethod
    def empty(cls) -> FrameBoxes:
        """No objects."""
        return EMPTY

    @classmethod
    def of(
        cls, boxes: np.ndarray, class_ids: np.ndarray, scores: np.ndarray | None = None
    ) -> FrameBoxes:
        """Boxes and class ids (scores 1 when not given) as the arrays FrameBoxes holds."""
        b = np.asarray(boxes, np.float32).reshape(-1, 4)
        c = np.asarray(class_ids, np.int32).reshape(-1)
        s = np.ones(c.shape[0], np.float32) if scores is None else np.asarray(scores, np.float32)
        if not b.shape[0] == c.shape[0] == s.shape[0]:
            raise ValueError(f"{b.shape[0]} boxes, {c.shape[0]} classes, {s.shape[0]} scores")
        return cls(b, s, c)


EMPTY = FrameBoxes(
    np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int32)
)


def area(xyxy: np.ndarray) -> np.ndarray:
    """Areas of (N, 4) boxes (0 for degenerate ones)."""
    wh = np.clip(xyxy[:, 2:4] - xyxy[:, 0:2], 0, None)
    out: np.ndarray = wh[:, 0] * wh[:, 1]
    return out


def intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) intersection areas of boxes a (N, 4) and b (M, 4)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    wh = np.clip(rb - lt, 0, None)
    out: np.ndarray = wh[..., 0] * wh[..., 1]
    return out


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) float32 intersection over union of boxes a (N, 4) and b (M, 4); 0 where empty."""
    if a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros((a.shape[0], b.shape[0]), np.float32)
    inter = intersection(a, b)
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def greedy_pairs(overlap: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one (row, column) pairs, best overlap first, each at least `threshold`.

    At most min(N, M) rounds, each taking the best remaining pair (the matching the
    cascade papers and frame-to-frame trackers use). `overlap` is not modified.
    """
    rows: list[int] = []
    cols: list[int] = []
    if overlap.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = np.array(overlap, np.float32)  # a copy: used pairs are blanked
    for _ in range(min(m.shape)):
        r, c = divmod(int(np.argmax(m)), m.shape[1])
        if m[r, c] < threshold:
            break
        rows.append(r)
        cols.append(c)
        m[r, :] = -1.0
        m[:, c] = -1.0
    return np.asarray(rows, np.int64), np.asarray(cols, np.int64)


def class_iou(ref: FrameBoxes, test: FrameBoxes) -> np.ndarray:
    """IoU of every `ref` box with every `test` box; -1 between different classes."""
    m = iou(ref.boxes, test.boxes)
    m[ref.class_ids[:, None] != test.class_ids[None, :]] = -1.0
    return m


def match_count(ref: FrameBoxes, test: FrameBoxes, threshold: float = 0.5) -> int:
    """True positives: greedy one-to-one pairs of the same class with IoU >= `threshold`."""
    if len(ref) == 0 or len(test) == 0:
        return 0
    rows, _ = greedy_pairs(class_iou(ref, test), threshold)
    return int(rows.shape[0])
