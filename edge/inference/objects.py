"""The top-level `objects` section applied right after detection, before tracking.

A detection whose label objects.track lacks is dropped (reason `untracked`); a tracked
label's detection under its filter's min_score (`score`) or with a box area outside
[min_area, max_area] in the source frame's pixels (`area`) is dropped. Each drop is counted
per label and reason (strata_edge_label_drops_total) and logged, at most a line a label
and reason every LOG_PERIOD_S. The per-class arrays are built once, so a frame costs a few
numpy operations over its boxes whatever the number of labels.

Which labels are tracked with a given detector (objects.track listed or left to its
defaults) is strata.shared.config.objects.tracked_labels; an unknown listed label stops
the node before it takes a frame.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from prometheus_client import Counter
from strata.shared.config.objects import ObjectsConfig, TrackedLabels, tracked_labels
from strata.shared.contracts import frame_pb2
from strata.shared.logs import RateLimitedLog
from strata.shared.vision import FrameBoxes

log = logging.getLogger(__name__)

LOG_PERIOD_S = 30.0
REASONS = ("untracked", "score", "area")
# The label counted for a class id outside the detector's labels (a label file shorter
# than the classes is refused at load; this keeps a bad id from indexing past the arrays).
UNKNOWN = "unknown"


class ObjectsFilter:
    """Drops the detections objects.track and objects.filters rule out; counts each."""

    def __init__(
        self,
        objects: ObjectsConfig | None,
        labels: Sequence[str],
        drops: Counter,
        score_threshold: float = 0.0,
    ) -> None:
        """`objects` None keeps every detection (a node built without the root config);
        raises UntrackableLabelError when objects.track lists a label `labels` lack."""
        self.labels = (*labels, UNKNOWN)
        self.drops = drops
        self.tracked: TrackedLabels | None = None
        n = len(labels)
        # Indexed by class id; the last slot is UNKNOWN (never tracked).
        self._tracked = np.zeros(n + 1, bool)
        self._min_score = np.zeros(n + 1, np.float32)
        self._min_area = np.zeros(n + 1, np.float32)
        self._max_area = np.full(n + 1, np.inf, np.float32)
        self._log = RateLimitedLog(log, LOG_PERIOD_S, logging.INFO)
        # (class id, reason) -> its counter child, looked up once.
        self._children: dict[tuple[int, str], Any] = {}
        if objects is None:
            self._tracked[:n] = True
            return
        self.tracked = tracked_labels(objects, labels)
        for i, label in enumerate(labels):
            if label not in self.tracked.labels:
                continue
            f = objects.filter_of(label)
            self._tracked[i] = True
            self._min_score[i] = f.min_score
            self._min_area[i] = f.min_area
            self._max_area[i] = f.max_area or np.inf
        self._startup_notes(objects, score_threshold)

    def _startup_notes(self, objects: ObjectsConfig, score_threshold: float) -> None:
        assert self.tracked is not None
        note = self.tracked.note()
        if note:
            log.warning("%s", note)
        log.info("tracking %s", ", ".join(self.tracked.labels))
        low = [
            f"{label} ({objects.filter_of(label).min_score:g})"
            for label in self.tracked.labels
            if objects.filter_of(label).min_score < score_threshold
        ]
        if low:
            # The detector's pre-NMS threshold drops those scores before any filter.
            log.warning(
                "objects.filters min_score under edge.detection.score_threshold %g for %s: "
                "detections between the two are never seen; lower "
                "edge.detection.score_threshold to keep them",
                score_threshold,
                ", ".join(low),
            )

    def __call__(
        self, h: frame_pb2.FrameHeader, boxes: FrameBoxes, count: bool = True
    ) -> FrameBoxes:
        """`boxes` (payload pixels) less those objects rules out, in the same order;
        `count` False: the drops are not counted (a second look at a frame counted once)."""
        if len(boxes) == 0:
            return boxes
        last = len(self.labels) - 1
        ids = boxes.class_ids
        ids = np.where((ids >= 0) & (ids < last), ids, last)
        untracked = ~self._tracked[ids]
        low = ~untracked & (boxes.scores < self._min_score[ids])
        wh = np.clip(boxes.boxes[:, 2:4] - boxes.boxes[:, 0:2], 0, None)
        area = wh[:, 0] * wh[:, 1] * _area_scale(h)
        size = ~untracked & ~low & ((area < self._min_area[ids]) | (area > self._max_area[ids]))
        dropped = untracked | low | size
        if not dropped.any():
            return boxes
        for reason, mask in zip(REASONS, (untracked, low, size), strict=True):
            if count and mask.any():
                self._count(h.camera_id, reason, np.bincount(ids[mask], minlength=last + 1))
        keep = ~dropped
        return FrameBoxes(boxes.boxes[keep], boxes.scores[keep], boxes.class_ids[keep])

    def _count(self, camera: str, reason: str, per_class: np.ndarray) -> None:
        # A loop over the labels dropped in this frame, not over boxes.
        for cid in np.flatnonzero(per_class).tolist():
            label, n = self.labels[cid], int(per_class[cid])
            child = self._children.get((cid, reason))
            if child is None:
                child = self._children[cid, reason] = self.drops.labels(label, reason)
            child.inc(n)
            self._log.warn(
                f"{label}/{reason}",
                "camera %s: dropped %d %s detection(s) (%s; objects.track, objects.filters)",
                camera,
                n,
                label,
                reason,
            )


def _area_scale(h: frame_pb2.FrameHeader) -> float:
    """Payload pixels to source pixels, for areas (as strata.edge.tracking.cascade.to_source
    scales the boxes)."""
    sw, sh = h.source_width or h.width, h.source_height or h.height
    if not h.width or not h.height:
        return 1.0
    return (sw / h.width) * (sh / h.height)
