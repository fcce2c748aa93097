"""What the device's site gate learns from: per detected frame, the tracked objects that are
new or have moved since their track began (`FrameAck.moving_objects`).

A parked car is an object in every frame of its camera, and no frame is worth sending for
it: the tracker holds it. So the answer the gate learns is not "an object is there" but "an
object is doing something": a box whose track is young (its first `young` detected frames)
or whose centre has moved at least `min_shift` of the box's height from where its track
began, or a box no track holds. Light, rain or swaying leaves over a parked car give none.
"""

from __future__ import annotations

import numpy as np
from strata.edge.tracking.tracker import TrackedBoxes

# Tracks remembered per camera; the oldest are forgotten beyond (ended tracks never return).
_MAX_TRACKS = 4096


class MovingObjects:
    """Per camera: where each track began, and how many detected frames it has had."""

    def __init__(self, min_shift: float = 0.25, young: int = 3) -> None:
        self.min_shift = min_shift
        self.young = young
        self._tracks: dict[tuple[int, str], dict[int, tuple[float, float, int]]] = {}

    def count(self, session_id: int, camera_id: str, tracked: TrackedBoxes | None, n: int) -> int:
        """Moving objects among a detected frame's `n` boxes (`tracked`: their tracks)."""
        if tracked is None:
            return n  # no tracking: every box is news
        tracks = self._tracks.setdefault((session_id, camera_id), {})
        for gone in tracked.ended:
            tracks.pop(int(gone), None)
        boxes = np.asarray(tracked.boxes, np.float64).reshape(-1, 4)
        moving = 0
        for box, tid in zip(boxes, tracked.track_ids.tolist(), strict=True):
            if not tid:
                moving += 1
                continue
            cx, cy = (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0
            height = max(float(box[3] - box[1]), 1.0)
            first = tracks.get(int(tid))
            if first is None:
                tracks[int(tid)] = (cx, cy, 1)
                moving += 1
                continue
            x0, y0, seen = first
            tracks[int(tid)] = (x0, y0, seen + 1)
            if seen < self.young or np.hypot(cx - x0, cy - y0) >= self.min_shift * height:
                moving += 1
        while len(tracks) > _MAX_TRACKS:
            tracks.pop(next(iter(tracks)))
        return moving

    def forget(self, camera_id: str) -> None:
        """A camera removed: its tracks go."""
        for key in [k for k in self._tracks if k[1] == camera_id]:
            del self._tracks[key]
