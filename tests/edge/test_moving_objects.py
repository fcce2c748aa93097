"""The site gate's answer: tracked objects that are new or moved since their track began."""

from __future__ import annotations

import numpy as np
from strata.edge.publish.moving import MovingObjects
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes


def test_a_parked_car_stops_counting_a_walker_keeps_counting() -> None:
    tracker = Tracker(TrackingConfig())
    moving = MovingObjects()
    counts = []
    for i in range(30):
        parked = (600.0, 40.0, 700.0, 100.0)
        walker = (100.0 + 6 * i, 300.0, 140.0 + 6 * i, 400.0)
        boxes = FrameBoxes.of(np.array([parked, walker]), np.array([2, 0]), np.array([0.9, 0.9]))
        counts.append(moving.count(1, "cam", tracker.update(i, boxes), len(boxes)))
    assert counts[:3] == [2, 2, 2]  # both new
    # The walker moves 6 px a frame: a quarter of its 100 px height after 5 frames; until
    # then only its youth counted it.
    assert all(c == 1 for c in counts[5:]), counts
    assert counts[3] in (0, 1) and counts[4] in (0, 1)


def test_no_tracking_counts_every_box_and_a_camera_is_forgotten() -> None:
    moving = MovingObjects()
    assert moving.count(1, "cam", None, 3) == 3
    tracker = Tracker(TrackingConfig())
    box = FrameBoxes.of(np.array([[0.0, 0.0, 50.0, 50.0]]), np.array([0]), np.array([0.9]))
    for i in range(5):
        moving.count(1, "cam", tracker.update(i, box), 1)
    moving.forget("cam")
    # Forgotten: its track is new again.
    assert moving.count(1, "cam", tracker.update(5, box), 1) == 1
