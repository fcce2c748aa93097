"""Held-out scores: detector AP at IoU 0.5 against the teacher's boxes, speed per frame."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from strata.shared.vision.boxes import iou
from strata.tools.distill.boxes import Detections


@dataclass(frozen=True, slots=True)
class DetectionScore:
    """AP50 (all-point interpolated, one class) with precision/recall at a threshold."""

    ap50: float
    precision: float  # at `conf`
    recall: float  # at `conf`
    conf: float
    frames: int
    truth_boxes: int
    predicted_boxes: int  # at `conf`


def _match(pred: Detections, truth: np.ndarray, thr: float) -> np.ndarray:
    """True-positive flag per predicted box: greedy by score, each truth box used once."""
    tp = np.zeros(len(pred), bool)
    if len(pred) == 0 or truth.shape[0] == 0:
        return tp
    order = np.argsort(-pred.scores)
    m = iou(pred.xyxy[order], truth)
    used = np.zeros(truth.shape[0], bool)
    for rank, row in enumerate(m):
        cand = np.where(used, -1.0, row)
        j = int(cand.argmax())
        if cand[j] >= thr:
            used[j] = True
            tp[order[rank]] = True
    return tp


def average_precision(
    preds: list[Detections], truths: list[np.ndarray], iou_thr: float = 0.5, conf: float = 0.25
) -> DetectionScore:
    """AP at IoU iou_thr over frames; preds should keep low-score boxes (conf ~0.001)."""
    if len(preds) != len(truths):
        raise ValueError(f"{len(preds)} prediction frames for {len(truths)} truth frames")
    n_truth = int(sum(t.shape[0] for t in truths))
    scores = [p.scores for p in preds]
    flags = [_match(p, t, iou_thr) for p, t in zip(preds, truths, strict=True)]
    s = np.concatenate(scores) if scores else np.zeros(0, np.float32)
    f = np.concatenate(flags) if flags else np.zeros(0, bool)
    if n_truth == 0:
        return DetectionScore(float("nan"), float("nan"), float("nan"), conf, len(preds), 0, 0)
    order = np.argsort(-s, kind="stable")
    tp = np.cumsum(f[order])
    fp = np.cumsum(~f[order])
    recall = tp / n_truth
    precision = tp / np.maximum(tp + fp, 1)
    # All-point interpolation (VOC 2010+ / COCO style envelope).
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[1.0], precision, [0.0]])
    mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
    step = np.flatnonzero(mrec[1:] != mrec[:-1])
    ap = float(np.sum((mrec[step + 1] - mrec[step]) * mpre[step + 1]))
    at = s >= conf
    n_at = int(at.sum())
    tp_at = int(f[at].sum())
    return DetectionScore(
        ap,
        tp_at / n_at if n_at else float("nan"),
        tp_at / n_truth,
        conf,
        len(preds),
        n_truth,
        n_at,
    )
