"""A saved run's detections tracked again offline: `strata bench rules --from DIR --retrack`.

On a detected frame the edge publishes the detector's own boxes (every one, tracked or
not: the tracker only adds ids), so a saved run (rules_frames.save_run) holds the
per-frame detections of every frame the edge detected. `retrack` feeds them through the
tracker as it is now (the edge's answering code, calibration.replay: skipped frames
answered by prediction or interpolation), so a tracker setting is tried on both daemon
runs in seconds, without the daemons.

`pts_clock` is the capture clock the reference is scored on: frame index over the clip's
frame rate (the source's presentation time), not the wall clock the device stamped, which
stalls and jumps with the machine's load and moves dwell times from run to run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from strata.edge.tracking.calibration import replay
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.bench.rules_frames import Tracked, replayed


def detections(frames: Sequence[Tracked], total: int) -> tuple[list[FrameBoxes], np.ndarray]:
    """Per frame index below `total`: the detector's boxes, and whether it ran there."""
    boxes = [FrameBoxes.empty() for _ in range(total)]
    kept = np.zeros(total, bool)
    for f in frames:
        if f.detected and 0 <= f.index < total:
            boxes[f.index] = FrameBoxes.of(f.boxes, f.class_ids, f.scores)
            kept[f.index] = True
    return boxes, kept


def retrack(
    frames: Sequence[Tracked],
    total: int,
    frame_size: tuple[int, int],
    tracking: TrackingConfig,
    capture_ns: Sequence[int],
) -> list[Tracked]:
    """`frames`' detections through the tracker configured by `tracking`: every frame
    index below `total` answered, frame i at `capture_ns[i]`."""
    boxes, kept = detections(frames, total)
    return replayed(replay(boxes, kept, tracking, *frame_size), capture_ns)


def _step(fps: float) -> float:
    return 1e9 / fps if fps > 0 else 1e8


def pts_clock(total: int, fps: float, origin_ns: int = 0) -> list[int]:
    """Capture time of frame i from the source's frame rate: `origin_ns` + i / fps."""
    step = _step(fps)
    return [origin_ns + round(i * step) for i in range(total)]


def pts_origin(frames: Sequence[Tracked], fps: float) -> int:
    """The capture time frame 0 has on the pts clock: the first frame keeps its own."""
    if not frames:
        return 0
    first = min(frames, key=lambda f: f.index)
    return first.capture_ns - round(first.index * _step(fps))


def on_pts_clock(frames: Sequence[Tracked], fps: float) -> list[Tracked]:
    """`frames` restamped with `pts_clock` (the first one keeps its capture time)."""
    origin, step = pts_origin(frames, fps), _step(fps)
    return [replace(f, capture_ns=origin + round(f.index * step)) for f in frames]
