"""How closely one model follows another on the same inputs.

Classifiers: top-1 agreement. Detectors: box F1 at IoU 0.5, the reference model's boxes
as truth, decoded with the edge tier's shared YOLO decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from strata.shared.models.manifest import Manifest
from strata.shared.vision.letterbox import plan_letterbox
from strata.shared.vision.yolo import FrameBoxes, decode_yolo


@dataclass(frozen=True, slots=True)
class Agreement:
    """Agreement of a test model's outputs with a reference model's."""

    metric: Literal["top1", "box_f1"]
    value: float | None  # None: undefined (neither model found a box)
    frames: int
    reference_items: int  # classifier: frames; detector: reference boxes
    test_items: int  # classifier: frames; detector: test boxes
    # ||test - ref|| / ||ref|| over the raw outputs; a detector's class-score rows only, since
    # its box rows (hundreds of pixels) would hide any error in the scores.
    output_rel_error: float


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of x1, y1, x2, y2 boxes."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def match_count(ref: FrameBoxes, test: FrameBoxes, iou: float = 0.5) -> int:
    """Test boxes matching a reference box of the same class at IoU >= iou, one to one.

    A pair matches when each is the other's best same-class overlap (mutual best): the
    greedy one-to-one matching whenever NMS has left the boxes of a class apart.
    """
    if len(ref) == 0 or len(test) == 0:
        return 0
    m = box_iou(ref.boxes, test.boxes)
    m[ref.class_ids[:, None] != test.class_ids[None, :]] = 0.0
    best_t = m.argmax(axis=1)
    best_r = m.argmax(axis=0)
    rows = np.arange(m.shape[0])
    mutual = (best_r[best_t] == rows) & (m[rows, best_t] >= iou)
    return int(mutual.sum())


def agreement(
    manifest: Manifest, ref: np.ndarray, test: np.ndarray, conf: float = 0.25, iou: float = 0.45
) -> Agreement:
    """Top-1 agreement (classify) or box F1 at IoU 0.5 (detect) of `test` against `ref`."""
    a, b = (ref[:, 4:], test[:, 4:]) if manifest.task == "detect" else (ref, test)
    rel = float(np.linalg.norm(b - a) / max(float(np.linalg.norm(a)), 1e-12))
    n = int(ref.shape[0])
    if manifest.task == "classify":
        same = int((ref.argmax(axis=1) == test.argmax(axis=1)).sum())
        return Agreement("top1", same / n, n, n, n, rel)
    size = manifest.input.height
    identity = [plan_letterbox(size, size, size)] * n  # boxes stay in input pixels
    refs = decode_yolo(ref, identity, conf, iou)
    tests = decode_yolo(test, identity, conf, iou)
    tp = sum(match_count(r, t, 0.5) for r, t in zip(refs, tests, strict=True))
    n_ref = sum(len(r) for r in refs)
    n_test = sum(len(t) for t in tests)
    f1 = 2 * tp / (n_ref + n_test) if n_ref + n_test else None
    return Agreement("box_f1", f1, n, n_ref, n_test, rel)
