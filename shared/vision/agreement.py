"""Cascade accuracy as NoScope and Reducto measure it: agreement with a reference detector.

The reference runs on every frame. The cascade's answer for a frame the device dropped is
what the edge published for it (the tracker's), or, for the naive baseline, the answer of
the last frame it kept (`propagate`). Agreement is reported three ways: tagging (does the
frame contain an object at all), counting (1 - |ref - ours| / max, 1 when both are 0) and
box F1 at IoU 0.5 (class-aware, greedy by IoU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class FrameBoxes:
    """Boxes (N, 4) x1 y1 x2 y2 in pixels and their class ids (N,)."""

    boxes: np.ndarray
    classes: np.ndarray

    @classmethod
    def empty(cls) -> FrameBoxes:
        """No objects."""
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return int(self.classes.shape[0])


@dataclass(frozen=True, slots=True)
class Agreement:
    """Agreement of a cascade with its reference over a clip."""

    frames: int
    tagging: float
    counting: float
    f1: float
    true_positives: int
    false_positives: int
    false_negatives: int


def propagate(kept: Mapping[int, FrameBoxes], total: int) -> list[FrameBoxes]:
    """Per frame: its own boxes if kept, else the last kept frame's (none before the first)."""
    out: list[FrameBoxes] = []
    last = FrameBoxes.empty()
    for i in range(total):
        last = kept.get(i, last)
        out.append(last)
    return out


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` (N, 4) with every box in `b` (M, 4)."""
    if a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros((a.shape[0], b.shape[0]), np.float32)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def matches(ref: FrameBoxes, ours: FrameBoxes, iou: float = 0.5) -> int:
    """True positives: greedy one-to-one pairs of the same class with IoU >= `iou`."""
    m = iou_matrix(ref.boxes, ours.boxes)
    if m.size == 0:
        return 0
    m = np.where(ref.classes[:, None] == ours.classes[None, :], m, 0.0)
    tp = 0
    # At most min(N, M) rounds, each taking the best remaining pair.
    for _ in range(min(m.shape)):
        flat = int(np.argmax(m))
        r, c = divmod(flat, m.shape[1])
        if m[r, c] < iou:
            break
        tp += 1
        m[r, :] = 0.0
        m[:, c] = 0.0
    return tp


def agreement(reference: Sequence[FrameBoxes], ours: Sequence[FrameBoxes]) -> Agreement:
    """Tagging, counting and F1 of `ours` against `reference`, frame by frame."""
    if len(reference) != len(ours):
        raise ValueError(f"{len(reference)} reference frames but {len(ours)} cascade frames")
    n = len(reference)
    if n == 0:
        return Agreement(0, 1.0, 1.0, 1.0, 0, 0, 0)
    rc = np.array([len(f) for f in reference], np.float64)
    oc = np.array([len(f) for f in ours], np.float64)
    tagging = float(np.mean((rc > 0) == (oc > 0)))
    top = np.maximum(rc, oc)
    counting = float(np.mean(np.where(top > 0, 1.0 - np.abs(rc - oc) / np.maximum(top, 1), 1.0)))
    tp = sum(matches(r, o) for r, o in zip(reference, ours, strict=True))
    fp = int(oc.sum()) - tp
    fn = int(rc.sum()) - tp
    f1 = 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return Agreement(n, tagging, counting, f1, tp, fp, fn)
