"""What the rules stage takes per answered frame of a camera: the tracks, where they are.

Journey: the tracking stage answers every source frame of a camera, in frame order,
either from the detector (a kept frame: `Tracker.update`, each box carrying the id of the
track it matched) or from the tracker alone (a frame the device dropped, `FRAME_KIND_SKIPPED`:
`Tracker.predict`, or the interpolation in edge/tracking/answers.py). It turns that
`TrackedBoxes` into a `TrackFrame`:

- `track_ids`, `boxes`, `scores`, `class_ids`: the boxes with a track id (id 0 dropped);
- `confirmed`: the track has `tracking.min_hits` hits (the tracker's `_hits`; today
  `predict` shows only confirmed tracks and `update` returns tentative ones too, so the
  stage needs the hits of the matched tracks: a small accessor on Tracker);
- `observed`: a detection matched the track at this frame (`update`'s boxes, uncertainty 0);
  false for predicted or interpolated boxes;
- `ended`: ids the tracker retired at this frame (`Tracker._retire`; today it drops them
  silently, so the stage needs them returned); `rules.end_after_s` ends a track the tracker
  never reports;
- `labels`: the detector's label names by class id (the model's, one tuple shared by every
  frame, not copied).

The rules engine (engine.py) evaluates it and hands back track events; the publish and
uplink stages send them on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class TrackFrame:
    """One answered frame of one camera: N tracked boxes in source pixels."""

    camera_id: str
    # Capture time of the source frame (FrameHeader.capture_ns): the rules' clock.
    capture_ns: int
    # The source frame's (width, height): boxes are in its pixels.
    frame_size: tuple[int, int]
    track_ids: np.ndarray  # (N,) uint64, non-zero, each at most once
    boxes: np.ndarray  # (N, 4) x1, y1, x2, y2
    scores: np.ndarray  # (N,)
    class_ids: np.ndarray  # (N,) int
    confirmed: np.ndarray  # (N,) bool
    observed: np.ndarray  # (N,) bool
    labels: Sequence[str] = ()
    ended: tuple[int, ...] = ()

    def __len__(self) -> int:
        return int(self.track_ids.shape[0])

    def label(self, class_id: int) -> str:
        """The label name of a class id (its number when the model has no names)."""
        if 0 <= class_id < len(self.labels):
            return self.labels[class_id]
        return str(class_id)
