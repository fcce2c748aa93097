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


class _Origins:
    """One camera's tracks in the order first seen: id, where it began, detected frames."""

    __slots__ = ("ids", "seen", "x0", "y0")

    def __init__(self) -> None:
        self.ids = np.empty(0, np.int64)
        self.x0 = np.empty(0, np.float64)
        self.y0 = np.empty(0, np.float64)
        self.seen = np.empty(0, np.int64)

    def keep(self, mask: np.ndarray) -> None:
        self.ids, self.x0, self.y0 = self.ids[mask], self.x0[mask], self.y0[mask]
        self.seen = self.seen[mask]


class MovingObjects:
    """Per camera: where each track began, and how many detected frames it has had."""

    def __init__(self, min_shift: float = 0.25, young: int = 3) -> None:
        self.min_shift = min_shift
        self.young = young
        self._tracks: dict[tuple[int, str], _Origins] = {}

    def count(self, session_id: int, camera_id: str, tracked: TrackedBoxes | None, n: int) -> int:
        """Moving objects among a detected frame's `n` boxes (`tracked`: their tracks)."""
        if tracked is None:
            return n  # no tracking: every box is news
        o = self._tracks.setdefault((session_id, camera_id), _Origins())
        if len(tracked.ended) and len(o.ids):
            o.keep(~np.isin(o.ids, np.asarray(tracked.ended, np.int64)))
        boxes = np.asarray(tracked.boxes, np.float64).reshape(-1, 4)
        tid = np.asarray(tracked.track_ids, np.int64).reshape(-1)
        cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2.0, (boxes[:, 1] + boxes[:, 3]) / 2.0
        height = np.maximum(boxes[:, 3] - boxes[:, 1], 1.0)
        # Each box's track among those remembered (ids are unique within a frame).
        found = old = np.zeros(len(tid), bool)
        if len(o.ids):
            order = np.argsort(o.ids, kind="stable")
            idx = order[np.minimum(np.searchsorted(o.ids[order], tid), len(order) - 1)]
            found = (tid != 0) & (o.ids[idx] == tid)
            shift = np.hypot(cx - o.x0[idx], cy - o.y0[idx])
            old = found & (o.seen[idx] >= self.young) & (shift < self.min_shift * height)
            o.seen[idx[found]] += 1
        new = (tid != 0) & ~found
        if new.any():  # a track seen the first time begins here
            o.ids = np.concatenate([o.ids, tid[new]])
            o.x0, o.y0 = np.concatenate([o.x0, cx[new]]), np.concatenate([o.y0, cy[new]])
            o.seen = np.concatenate([o.seen, np.ones(int(new.sum()), np.int64)])
        if len(o.ids) > _MAX_TRACKS:  # the oldest are forgotten
            o.keep(np.arange(len(o.ids)) >= len(o.ids) - _MAX_TRACKS)
        return int(len(tid) - np.count_nonzero(old))

    def forget(self, camera_id: str) -> None:
        """A camera removed: its tracks go."""
        for key in [k for k in self._tracks if k[1] == camera_id]:
            del self._tracks[key]
