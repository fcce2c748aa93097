"""Cascade accuracy as NoScope and Reducto measure it: agreement with a reference detector.

The reference runs on every frame. The cascade's answer for a frame the device dropped is
what the edge published for it (the tracker's), or, for the naive baseline, the answer of
the last frame it kept (`propagate`). Agreement is reported three ways: tagging (does the
frame contain an object at all), counting (1 - |ref - ours| / max, 1 when both are 0) and
box F1 at IoU 0.5 (class-aware, greedy by IoU: boxes.match_count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .boxes import FrameBoxes, match_count


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
    tp = sum(match_count(r, o) for r, o in zip(reference, ours, strict=True))
    fp = int(oc.sum()) - tp
    fn = int(rc.sum()) - tp
    f1 = 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return Agreement(n, tagging, counting, f1, tp, fp, fn)


def windowed_counting(
    reference: Sequence[FrameBoxes], ours: Sequence[FrameBoxes], window: int
) -> float:
    """Counting agreement of the mean count over consecutive windows of `window` frames.

    What a user counting people over time reads (how many were in view that second), as
    opposed to `agreement`'s per-frame counting, which also scores the reference detector's
    frame-to-frame flicker: on vtest the detector agrees with itself one frame later at
    0.94 per frame, 0.98 per second. Same formula per window; the last window may be short.
    """
    if len(reference) != len(ours):
        raise ValueError(f"{len(reference)} reference frames but {len(ours)} cascade frames")
    if window < 1:
        raise ValueError(f"window must be at least 1 frame, not {window}")
    if not reference:
        return 1.0
    rc = np.array([len(f) for f in reference], np.float64)
    oc = np.array([len(f) for f in ours], np.float64)
    starts = np.arange(0, len(rc), window)
    sizes = np.diff(np.append(starts, len(rc)))
    rm = np.add.reduceat(rc, starts) / sizes
    om = np.add.reduceat(oc, starts) / sizes
    top = np.maximum(rm, om)
    return float(np.mean(np.where(top > 0, 1.0 - np.abs(rm - om) / np.where(top > 0, top, 1), 1)))
