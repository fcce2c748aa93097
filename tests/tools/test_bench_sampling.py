"""The bench's uniform baseline, object recall and curve on a scene with known motion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes
from strata.tools.bench.sampling import (
    object_recall,
    reference_tracks,
    uniform_agreement,
    uniform_curve,
)

ROOT = Path(__file__).resolve().parents[2]


def scene(n: int) -> list[FrameBoxes]:
    """A walker throughout; a second object only on frames 10-13 (a short visit)."""
    out = []
    for i in range(n):
        xs = [50.0 + 4.0 * i] + ([300.0] if 10 <= i <= 13 else [])
        b = np.array([[x, 100.0, x + 30.0, 190.0] for x in xs], np.float32)
        out.append(FrameBoxes(b, np.full(len(xs), 0.9, np.float32), np.zeros(len(xs), np.int32)))
    return out


def test_object_recall_counts_objects_seen_on_detected_frames_only() -> None:
    ref = scene(40)
    tracks = reference_tracks(ref, TrackingConfig())
    assert {int(t) for ids in tracks for t in ids.tolist()} == {1, 2}
    every_5th = {i: ref[i] for i in range(0, 40, 5)}
    r = object_recall(ref, tracks, every_5th)
    assert (r.seen, r.total) == (2, 2)  # frame 10 sees the visitor
    every_8th = {i: ref[i] for i in range(0, 40, 8)}
    assert object_recall(ref, tracks, every_8th).recall == 0.5
    assert object_recall(ref, tracks, {}).recall == 0.0


def test_uniform_baseline_and_curve() -> None:
    ref = scene(40)
    a, kept = uniform_agreement(ref, 0.25, TrackingConfig(), 640, 480)
    assert kept.sum() == 10 and a.frames == 40
    curve = uniform_curve(ref, [1.0, 0.5, 0.125], TrackingConfig(), 640, 480)
    assert [p.kept for p in curve] == [1.0, 0.5, 0.125]
    assert curve[0].f1 == 1.0 and curve[0].recall == 1.0
    assert curve[2].recall == 0.5
    assert curve[2].f1 < curve[0].f1


def test_payload_run_encodes_only_kept_frames_and_detects_in_source_pixels(
    synthetic_mp4: Path,
) -> None:
    from strata.edge.tracking.calibration import uniform
    from strata.tools.bench.payloads import detector_for, h264_run, original_boxes

    det = detector_for(ROOT / "shared" / "starter_models" / "yolov8n" / "model.onnx", 4)
    try:
        ref = original_boxes(synthetic_mp4, det)
        assert len(ref) == 60
        kept = uniform(60, 0.5)
        run = h264_run(synthetic_mp4, kept, det, 160)
        assert run.kept == 30 and sorted(run.boxes) == list(range(0, 60, 2))
        assert run.size == (160, 120) and 0 < run.bytes < synthetic_mp4.stat().st_size
        for b in run.boxes.values():
            assert (b.boxes[:, 2:] <= np.array([320.0, 240.0]) + 1).all()
    finally:
        det.close()


def test_an_object_starts_with_a_confident_box() -> None:
    # The scene's objects at 0.9 and, for 10 frames, a faint box (0.3) apart: noise.
    ref = scene(20)
    for i in range(5, 15):
        r = ref[i]
        ref[i] = FrameBoxes(
            np.concatenate([r.boxes, [[500.0, 300.0, 530.0, 390.0]]]).astype(np.float32),
            np.concatenate([r.scores, [0.3]]).astype(np.float32),
            np.concatenate([r.class_ids, [0]]).astype(np.int32),
        )
    tracks = reference_tracks(ref, TrackingConfig())
    seen_first = {i: ref[i] for i in range(0, 20, 10)}
    # The walker and the visitor of frames 10-13.
    assert object_recall(ref, tracks, seen_first).total == 2
    # Started by weaker boxes too, the faint box would be a third object.
    weak = reference_tracks(ref, TrackingConfig(), min_score=0.25)
    assert object_recall(ref, weak, seen_first).total == 3
