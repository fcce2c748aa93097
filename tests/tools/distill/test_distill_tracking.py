"""Fusing teachers per frame and tracking over time."""

from __future__ import annotations

import numpy as np
from strata.tools.distill.boxes import (
    SOURCE_FILLED,
    SOURCE_HOG,
    SOURCE_MOTION,
    Detections,
)
from strata.tools.distill.tracking import FusionSettings, fuse_frame, track_labels


def _dets(boxes: list[list[float]], score: float, source: int) -> Detections:
    return Detections.of(np.asarray(boxes, np.float32), np.full(len(boxes), score), source)


def test_blob_inside_hog_box_replaces_it_and_loose_blob_stays() -> None:
    hog = _dets([[100, 100, 160, 260]], 1.5, SOURCE_HOG)
    blobs = _dets([[110, 110, 150, 255], [400, 50, 420, 110]], 0.6, SOURCE_MOTION)
    out = fuse_frame(hog, blobs, FusionSettings())
    assert len(out) == 2
    np.testing.assert_allclose(out.xyxy[0], [110, 110, 150, 255])
    assert out.sources[0] == SOURCE_HOG | SOURCE_MOTION
    np.testing.assert_allclose(out.xyxy[1], [400, 50, 420, 110])
    assert out.sources[1] == SOURCE_MOTION


def test_weak_hog_box_needs_motion_and_a_partial_blob_keeps_the_hog_box() -> None:
    s = FusionSettings()
    weak = _dets([[0, 0, 60, 160]], 0.4, SOURCE_HOG)
    assert len(fuse_frame(weak, Detections.empty(), s)) == 0
    feet = _dets([[10, 120, 50, 158]], 0.6, SOURCE_MOTION)  # only the legs moved
    out = fuse_frame(weak, feet, s)
    assert len(out) == 1
    np.testing.assert_allclose(out.xyxy[0], [0, 0, 60, 160])


def test_duplicate_detector_boxes_merge_their_sources() -> None:
    a = _dets([[0, 0, 50, 100]], 2.0, SOURCE_HOG)
    b = Detections.of(np.asarray([[2, 2, 50, 100]], np.float32), np.ones(1), 4)
    out = fuse_frame(Detections.concat([a, b]), Detections.empty(), FusionSettings())
    assert len(out) == 1
    assert out.sources[0] == SOURCE_HOG | 4


def test_tracks_fill_gaps_and_drop_blips() -> None:
    frames: list[Detections] = []
    for f in range(20):
        parts = []
        if f not in (8, 9):  # the detector missed the walker twice
            x = 10.0 + 4 * f
            parts.append(_dets([[x, 50, x + 20, 110]], 1.5, SOURCE_HOG))
        if f == 15:  # a one-frame false positive far away
            parts.append(_dets([[300, 300, 340, 380]], 1.5, SOURCE_HOG))
        frames.append(Detections.concat(parts))
    labels, stats = track_labels(frames, FusionSettings(smooth=0))
    assert all(len(d) == 1 for d in labels)
    np.testing.assert_allclose(labels[8].xyxy[0], [42, 50, 62, 110], atol=1e-4)
    assert labels[9].sources[0] == SOURCE_FILLED
    assert stats.tracks_kept == 1 and stats.boxes_filled == 2
    assert stats.tracks == 2


def test_motion_only_tracks_need_length_and_an_upright_shape() -> None:
    s = FusionSettings(smooth=0, motion_only_min_track=10)
    upright = [_dets([[10.0 + f, 10, 30.0 + f, 70]], 0.7, SOURCE_MOTION) for f in range(12)]
    flat = [_dets([[10.0 + f, 10, 70.0 + f, 30]], 0.7, SOURCE_MOTION) for f in range(12)]
    short = [_dets([[10.0 + f, 10, 30.0 + f, 70]], 0.7, SOURCE_MOTION) for f in range(6)]
    assert sum(len(d) for d in track_labels(upright, s)[0]) == 12
    assert sum(len(d) for d in track_labels(flat, s)[0]) == 0
    assert sum(len(d) for d in track_labels(short, s)[0]) == 0
