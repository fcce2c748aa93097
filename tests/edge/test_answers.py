"""Answers for every source frame: skipped frames wait for the kept frames before them."""

from __future__ import annotations

import numpy as np
from strata.edge.tracking.answers import Answers
from strata.edge.tracking.calibration import replay, uniform
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes
from strata.shared.vision.agreement import agreement


def header(i: int, cam: str = "cam") -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id=cam, session_id=7, frame_index=i, sequence=i + 1, width=640, height=480
    )


def walker(i: int) -> FrameBoxes:
    x = 100.0 + 6.0 * i
    return FrameBoxes(
        np.array([[x, 200.0, x + 30.0, 290.0]], np.float32),
        np.array([0.9], np.float32),
        np.array([0], np.int32),
    )


def test_predict_mode_waits_for_earlier_kept_frames_only() -> None:
    a = Answers(TrackingConfig(answer="predict"))
    a.expect(header(0))
    a.skipped(header(1), 0.0, 0)
    # Frame 0 is still at the detector: frame 1 cannot be answered yet.
    assert a.ready(now=0.0) == []
    tracked, done = a.detected(header(0), walker(0))
    assert tracked.track_ids.tolist() == [1] and not tracked.predicted
    assert [x.header.frame_index for x in done] == [1]
    assert done[0].how == "predicted" and done[0].boxes.predicted
    assert done[0].boxes.track_ids.tolist() == [1]
    # Nothing pending before it: a later skipped frame is answered at once.
    a.skipped(header(2), 0.0, 0)
    assert [x.header.frame_index for x in a.ready(now=0.0)] == [2]


def test_interpolate_mode_answers_between_two_detections() -> None:
    a = Answers(TrackingConfig(answer="interpolate"))
    a.expect(header(0))
    a.detected(header(0), walker(0))
    for i in (1, 2, 3):
        a.skipped(header(i), 0.0, 0)
    assert a.ready(now=0.0) == []
    a.expect(header(4))
    _, done = a.detected(header(4), walker(4))
    assert [x.header.frame_index for x in done] == [1, 2, 3]
    assert all(x.how == "interpolated" for x in done)
    for x in done:
        want = walker(x.header.frame_index).boxes
        assert np.allclose(x.boxes.boxes, want, atol=0.01)


def test_a_lost_kept_frame_holds_answers_at_most_hold_s() -> None:
    a = Answers(TrackingConfig(answer="interpolate", hold_s=1.0))
    a.expect(header(0))
    a.skipped(header(1), 100.0, 0)
    assert a.ready(now=100.5) == []
    late = a.ready(now=101.0)
    assert [x.header.frame_index for x in late] == [1] and late[0].how == "timeout"
    # Given up explicitly: no wait at all.
    b = Answers(TrackingConfig(answer="predict"))
    b.expect(header(0))
    b.skipped(header(1), 0.0, 0)
    b.abandon(header(0))
    assert [x.header.frame_index for x in b.ready(now=0.0)] == [1]


def test_cameras_and_sessions_are_separate() -> None:
    a = Answers(TrackingConfig())
    a.expect(header(0, "a"))
    a.skipped(header(1, "b"), 0.0, 0)
    assert [x.header.camera_id for x in a.ready(now=0.0)] == ["b"]
    assert a.held() == 0
    # Camera a still waits for its frame 0 at the detector: only b goes.
    assert a.forget_idle(0.0, now=1e12) == 1


def test_replay_scores_uniform_sampling_with_the_nodes_tracker() -> None:
    ref = [walker(i) for i in range(40)]
    kept = uniform(40, 0.25)
    assert kept.sum() == 10 and kept[0]
    f1 = {}
    for mode in ("predict", "interpolate"):
        out = replay(ref, kept, TrackingConfig(answer=mode), 640, 480)
        assert sum(o.predicted for o in out) == 30
        f1[mode] = agreement(ref, [o.as_frame_boxes() for o in out]).f1
    # Prediction misses only before the first velocity is known; interpolation is exact.
    assert f1["predict"] >= 0.9
    assert f1["interpolate"] == 1.0


def test_a_track_missed_in_the_next_detection_is_held_for_the_first_half() -> None:
    # Two walkers at frame 0; at frame 6 the detector misses the second (or it left).
    def two(i: int) -> FrameBoxes:
        w = walker(i)
        other = np.array([[400.0, 100.0, 430.0, 190.0]], np.float32)
        return FrameBoxes(
            np.concatenate([w.boxes, other]),
            np.array([0.9, 0.3], np.float32),  # a low score still makes a track
            np.array([0, 0], np.int32),
        )

    a = Answers(TrackingConfig(answer="interpolate"))
    a.expect(header(0))
    a.detected(header(0), two(0))
    for i in range(1, 6):
        a.skipped(header(i), 0.0, 0)
    a.expect(header(6))
    _, done = a.detected(header(6), walker(6))
    counts = {x.header.frame_index: len(x.boxes) for x in done}
    # Frames 1-2 (before the middle) still show it where it was; 3-5 only the walker.
    assert counts == {1: 2, 2: 2, 3: 1, 4: 1, 5: 1}
    first = done[0].boxes
    assert np.allclose(first.boxes[1], [400.0, 100.0, 430.0, 190.0])


def test_a_scene_change_ends_the_tracks_and_is_not_interpolated_across() -> None:
    a = Answers(TrackingConfig(answer="interpolate", min_hits=1))
    for i in (0, 1, 2):
        a.expect(header(i))
        a.detected(header(i), walker(i))
    for i in (3, 4):
        a.skipped(header(i), 0.0, 0)
    cut = header(5)
    cut.scene_change = True
    elsewhere = FrameBoxes(
        np.array([[500.0, 50.0, 540.0, 120.0]], np.float32),
        np.array([0.9], np.float32),
        np.array([0], np.int32),
    )
    a.expect(cut)
    tracked, done = a.detected(cut, elsewhere)
    # The frames before the cut are the old scene's, predicted from its tracks.
    assert [(x.header.frame_index, x.how) for x in done] == [(3, "predicted"), (4, "predicted")]
    assert done[0].boxes.track_ids.tolist() == [1]
    # The new scene's object gets a new track; the old one ends at the cut.
    assert tracked.track_ids.tolist() == [2] and tracked.ended == (1,)
    tracker = a.tracker(7, "cam")
    assert tracker is not None and len(tracker) == 1


def test_frames_the_motion_gate_found_unchanged_show_no_one_who_arrives_later() -> None:
    """A passage starts after an empty street: frames dropped for no motion (the device's
    skip reason) looked like the last kept one, so the people first detected at the next
    kept frame are not drawn over them; frames dropped for the gap (min_gap) still are."""

    def skipped(i: int, reason: str) -> frame_pb2.FrameHeader:
        h = header(i)
        h.skip_reason = reason
        return h

    for reason, want in (("motion", [0] * 9), ("min_gap", [0, 0, 0, 0, 1, 1, 1, 1, 1])):
        a = Answers(TrackingConfig(answer="interpolate"))
        a.expect(header(0))
        a.detected(header(0), FrameBoxes.empty())
        for i in range(1, 10):
            a.skipped(skipped(i, reason), 0.0, 0)
        a.expect(header(10))
        _, done = a.detected(header(10), walker(10))
        assert [len(x.boxes) for x in done] == want, reason
    # And someone there on the kept frame before them stays there all along.
    a = Answers(TrackingConfig(answer="interpolate"))
    a.expect(header(0))
    a.detected(header(0), walker(0))
    for i in range(1, 10):
        a.skipped(skipped(i, "motion"), 0.0, 0)
    a.expect(header(10))
    _, done = a.detected(header(10), FrameBoxes.empty())
    assert [len(x.boxes) for x in done] == [1] * 9
