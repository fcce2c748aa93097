"""Cascade figures beyond frame agreement: the uniform baseline with the same tracker,
object-level recall, and the frames-kept curve.

All of them start from the reference run (the detector on every frame) and replay a
kept/dropped pattern through the edge's own answering code (`strata.edge.tracking.calibration`),
so the baseline gets exactly the tracker the cascade had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from strata.edge.tracking.calibration import class_boxes, replay, uniform
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes, iou
from strata.shared.vision.agreement import Agreement, agreement


@dataclass(frozen=True, slots=True)
class Recall:
    """Reference objects (tracks of at least `min_frames` frames) the cascade detected."""

    seen: int
    total: int

    @property
    def recall(self) -> float:
        """Share seen (1 when there were none)."""
        return self.seen / self.total if self.total else 1.0


# An object starts with a confident box: the tracker's default start score was this
# before it tracked every box the detector reports (0.25), and the figure keeps its
# meaning. Tracks started by weaker boxes alone are mostly the detector's noise (vtest:
# 40 such tracks of 3+ frames instead of 26).
OBJECT_SCORE = 0.4


def reference_tracks(
    reference: Sequence[FrameBoxes], cfg: TrackingConfig, min_score: float = OBJECT_SCORE
) -> list[np.ndarray]:
    """Track ids of the reference boxes, the edge's tracker run on every frame; only a box
    scored `min_score` or more starts a track (weaker ones extend tracks)."""
    t = Tracker(cfg.model_copy(update={"high_score": min_score, "new_track_score": min_score}))
    return [t.update(i, boxes).track_ids for i, boxes in enumerate(reference)]


def object_recall(
    reference: Sequence[FrameBoxes],
    track_ids: Sequence[np.ndarray],
    detected: Mapping[int, FrameBoxes],
    min_frames: int = 3,
    min_iou: float = 0.5,
) -> Recall:
    """How many reference objects the cascade saw at least once.

    An object is a reference track lasting `min_frames` frames or more (shorter ones are
    the detector's flicker); it is seen when, on a frame the cascade ran the detector on
    (`detected`, frame index -> its boxes), one of those boxes of the same class overlaps
    one of the object's boxes by `min_iou`. Predicted boxes do not count: a prediction cannot
    discover an object.
    """
    length: dict[int, int] = {}
    for ids in track_ids:
        for t in ids.tolist():
            if t:
                length[t] = length.get(t, 0) + 1
    objects = {t for t, n in length.items() if n >= min_frames}
    seen: set[int] = set()
    for i, ours in detected.items():
        if i >= len(reference) or not len(ours):
            continue
        ref = reference[i]
        m = iou(ref.boxes, ours.boxes)
        if m.size == 0:
            continue
        same = ref.class_ids[:, None] == ours.class_ids[None, :]
        hit = ((m >= min_iou) & same).any(axis=1)
        seen.update(int(t) for t in track_ids[i][hit].tolist() if t in objects)
    return Recall(len(seen), len(objects))


def uniform_agreement(
    reference: Sequence[FrameBoxes],
    fraction: float,
    cfg: TrackingConfig,
    width: int,
    height: int,
    frames: Sequence[FrameBoxes] | None = None,
) -> tuple[Agreement, np.ndarray]:
    """Keeping every k-th frame (`fraction` of them) with the node's tracker answering the
    rest: agreement with the reference, and the kept mask. `frames`: the detector's boxes
    as some other path sent every frame (default: the reference's own)."""
    kept = uniform(len(reference), fraction)
    out = replay(reference if frames is None else frames, kept, cfg, width, height)
    ref = [class_boxes(r) for r in reference]
    return agreement(ref, [class_boxes(o) for o in out]), kept


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One point of the frames-kept curve."""

    kept: float
    f1: float
    counting: float
    recall: float


def uniform_curve(
    reference: Sequence[FrameBoxes],
    fractions: Sequence[float],
    cfg: TrackingConfig,
    width: int,
    height: int,
) -> list[CurvePoint]:
    """The uniform baseline at each fraction of frames kept."""
    tracks = reference_tracks(reference, cfg)
    out = []
    for f in fractions:
        a, kept = uniform_agreement(reference, f, cfg, width, height)
        detected = {i: reference[i] for i in np.flatnonzero(kept).tolist()}
        r = object_recall(reference, tracks, detected)
        out.append(CurvePoint(float(kept.mean()), a.f1, a.counting, r.recall))
    return out
