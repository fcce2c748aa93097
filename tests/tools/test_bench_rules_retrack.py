"""`strata bench rules --retrack`: saved detections tracked again offline, and the source's
clock the reference is scored on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from strata.shared.config.edge import TrackingConfig
from strata.tools.bench.rules import VTEST_RULES, BenchSetup, Collected, evaluate
from strata.tools.bench.rules_frames import Tracked
from strata.tools.bench.rules_retrack import detections, on_pts_clock, pts_clock, retrack

NS = 1_000_000_000
SIZE = (768, 576)


def _walk(detected: list[bool], track: int = 7, wall_ns: list[int] | None = None) -> list[Tracked]:
    """A person walking right across the frame, as a run published it (its ids: `track`)."""
    out = []
    for i, det in enumerate(detected):
        x = 150.0 + 10.0 * i
        out.append(
            Tracked(
                index=i,
                capture_ns=wall_ns[i] if wall_ns else i * NS // 10,
                boxes=np.array([[x - 20, 260.0, x + 20, 345.0]]),
                scores=np.array([0.9]),
                class_ids=np.array([0]),
                track_ids=np.array([track], np.uint64),
                detected=det,
            )
        )
    return out


def test_detections_are_the_detected_frames_boxes_only() -> None:
    frames = _walk([True, False, True])
    boxes, kept = detections(frames, 4)
    assert kept.tolist() == [True, False, True, False]
    assert [len(b) for b in boxes] == [1, 0, 1, 0]
    assert np.array_equal(boxes[2].boxes, frames[2].boxes.astype(np.float32))


def test_retrack_answers_every_frame_with_the_trackers_own_ids() -> None:
    frames = _walk([i % 5 == 0 for i in range(31)])
    clock = pts_clock(31, 10.0, 5 * NS)
    out = retrack(frames, 31, SIZE, TrackingConfig(answer="interpolate"), clock)
    assert [f.index for f in out] == list(range(31))
    assert [f.capture_ns for f in out] == clock
    assert [f.detected for f in out] == [i % 5 == 0 for i in range(31)]
    # One track, the tracker's first id (not the id the run published), on every frame.
    assert all(f.track_ids.tolist() == [1] for f in out)
    # Interpolated between looks: the skipped frames' boxes follow the walk.
    assert np.allclose(out[12].boxes, frames[12].boxes, atol=1.0)


def test_the_pts_clock_keeps_the_first_frames_time_and_steps_by_the_frame_rate() -> None:
    wall = [3 * NS, 3 * NS + 50_000_000, 5 * NS, 5 * NS + 1]  # a stall, then a burst
    frames = _walk([True] * 4, wall_ns=wall)[1:]
    assert [f.capture_ns for f in on_pts_clock(frames, 10.0)] == [
        wall[1] + k * NS // 10 for k in range(3)
    ]


def test_a_reference_on_the_wall_clock_is_scored_on_the_pts_clock(tmp_path: Path) -> None:
    # 2.4 s in the plaza (25 frames at 10 fps), but the wall clock stalled 2 s meanwhile:
    # no 3 s dwell on the source's clock, one on the wall's (the cascade keeps its clock).
    wall = [i * NS // 10 + (2 * NS if i >= 12 else 0) for i in range(25)]
    box = np.array([[600.0, 350.0, 640.0, 430.0]])
    still = [
        Tracked(i, t, box, np.array([0.9]), np.array([0]), np.array([1], np.uint64), True)
        for i, t in enumerate(wall)
    ]
    Collected(still, still, [], [], ("person",), SIZE, 10.0).save(tmp_path)
    setup = BenchSetup(tmp_path / "absent.mp4", tmp_path, VTEST_RULES, cost_frames=3)
    body = evaluate(Collected.load(tmp_path), setup, progress=lambda _line: None)
    ref, cas = body["runs"]["reference"], body["runs"]["cascade"]
    assert "dwell_exceeded linger" not in ref["counts"]
    assert cas["counts"].get("dwell_exceeded linger") == 1
    again = evaluate(
        Collected.load(tmp_path),
        BenchSetup(setup.clip, tmp_path, VTEST_RULES, cost_frames=3, retrack=TrackingConfig()),
        progress=lambda _line: None,
    )
    assert again["runs"]["reference"]["counts"] == ref["counts"]
    assert again["runs"]["cascade"]["source"] == "replay"
