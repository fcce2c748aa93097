"""The edge tracker: ids, association across gaps, predictions for frames not sent."""

from __future__ import annotations

import numpy as np
import pytest
from strata.edge.tracking.tracker import Tracker, _sigma_of, centre_distance, size_cost
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes, iou


def dets(*boxes: tuple[float, float, float, float], score: float = 0.9, cls: int = 0) -> FrameBoxes:
    b = np.array(boxes, np.float32).reshape(-1, 4)
    n = b.shape[0]
    return FrameBoxes(b, np.full(n, score, np.float32), np.full(n, cls, np.int32))


def walker(frame: int, x0: float = 100.0, vx: float = 6.0, y0: float = 200.0) -> tuple[float, ...]:
    x = x0 + vx * frame
    return (x, y0, x + 30.0, y0 + 90.0)


def test_iou_and_distance() -> None:
    a = np.array([[0, 0, 10, 10]], np.float32)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 0, 30, 10]], np.float32)
    assert np.allclose(iou(a, b), [[1.0, 50 / 150, 0.0]])
    assert np.allclose(centre_distance(a, b), [[0.0, 0.5, 2.0]])


def test_ids_stay_with_objects_across_a_gap_and_prediction_follows_velocity() -> None:
    t = Tracker(TrackingConfig())
    first = t.update(0, dets(walker(0), walker(0, x0=400.0, vx=-6.0)))
    assert set(first.track_ids.tolist()) == {1, 2}
    # Every 4th frame only: the walker moves 24 px between looks (its box is 30 wide).
    ids = []
    for f in range(4, 41, 4):
        r = t.update(f, dets(walker(f, x0=400.0, vx=-6.0), walker(f)))
        ids.append(r.track_ids.tolist())
    assert all(i == [2, 1] for i in ids)
    p = t.predict(42, 768, 576)
    assert p.predicted and len(p) == 2
    by_id = dict(zip(p.track_ids.tolist(), p.boxes.tolist(), strict=True))
    # The constant-velocity prediction lands within a few pixels of where they are.
    assert np.allclose(by_id[1], walker(42), atol=4.0)
    assert np.allclose(by_id[2], walker(42, x0=400.0, vx=-6.0), atol=4.0)
    assert (p.uncertainty > 0).all()
    assert t.uncertainty(60) > t.uncertainty(42)


def test_prediction_does_not_change_state() -> None:
    t = Tracker(TrackingConfig())
    for f in range(0, 20, 2):
        t.update(f, dets(walker(f)))
    a = t.predict(25).boxes.copy()
    t.predict(100)
    assert np.array_equal(t.predict(25).boxes, a)


def test_low_score_detection_keeps_the_track_but_does_not_start_one() -> None:
    cfg = TrackingConfig(high_score=0.5, new_track_score=0.5)
    t = Tracker(cfg)
    t.update(0, dets(walker(0)))
    r = t.update(1, dets(walker(1), score=0.3))
    assert r.track_ids.tolist() == [1]
    r = t.update(2, dets((600.0, 10.0, 630.0, 100.0), score=0.3))
    assert r.track_ids.tolist() == [0]
    assert len(t) == 1


def test_classes_never_match_and_lost_tracks_retire() -> None:
    t = Tracker(TrackingConfig(max_lost=5))
    t.update(0, dets(walker(0), cls=0))
    r = t.update(1, dets(walker(1), cls=1))
    assert r.track_ids.tolist() == [2]
    t.update(10, dets())
    assert len(t) == 0
    assert t.predict(11).track_ids.size == 0


def test_predicted_boxes_stay_in_the_frame() -> None:
    t = Tracker(TrackingConfig())
    for f in range(0, 10):
        t.update(f, dets(walker(f, x0=680.0, vx=5.0)))
    p = t.predict(12, 768, 576)
    assert len(p) == 1 and p.boxes[0, 2] <= 768
    # Centre gone past the right edge: no longer predicted.
    assert len(t.predict(30, 768, 576)) == 0


def test_unseen_at_the_last_detection_is_not_predicted() -> None:
    t = Tracker(TrackingConfig(max_predict=0))
    t.update(0, dets(walker(0), walker(0, y0=400.0)))
    t.update(1, dets(walker(1)))
    assert t.predict(2).track_ids.tolist() == [1]
    t2 = Tracker(TrackingConfig(max_predict=1))
    t2.update(0, dets(walker(0), walker(0, y0=400.0)))
    t2.update(1, dets(walker(1)))
    assert sorted(t2.predict(2).track_ids.tolist()) == [1, 2]


def test_two_people_crossing_paths_keep_their_ids() -> None:
    # Face to face on one path, one frame in five seen; the one in front hides the other
    # for three looks while they pass.
    t = Tracker(TrackingConfig())
    hidden = range(20, 31)
    for f in range(0, 56, 5):
        boxes = [walker(f, x0=100.0)]
        if f not in hidden:
            boxes.append(walker(f, x0=400.0, vx=-6.0, y0=205.0))
        r = t.update(f, dets(*boxes))
        assert r.track_ids.tolist() == [1, 2][: len(boxes)], f
    assert t.started == 2


def _stop_behind_a_pillar(cfg: TrackingConfig) -> list[int]:
    """Walks right for 20 frames, unseen for 20 while it stops, seen again where it went
    out of sight: the ids of its reappearance, then of a look later."""
    t = Tracker(cfg)
    for f in range(0, 21):
        t.update(f, dets(walker(f)))
    t.update(30, dets())  # looked, not there
    stopped = walker(20, x0=106.0)
    return [int(t.update(f, dets(stopped)).track_ids[0]) for f in (40, 41)]


def test_a_track_unseen_for_a_gap_is_recovered_by_its_last_observation() -> None:
    # The prediction carried it 120 px (1.3 box heights) on: too far to match it.
    assert _stop_behind_a_pillar(TrackingConfig(recover_distance=0.0)) == [2, 2]
    assert _stop_behind_a_pillar(TrackingConfig()) == [1, 1]


def test_recovery_leaves_a_newcomer_to_a_track_seen_at_the_last_look() -> None:
    t = Tracker(TrackingConfig())
    for f in range(0, 46, 5):
        t.update(f, dets(walker(f)))
    # The walker is missed at the next look; someone new stands 0.9 box heights behind
    # where it was last seen (its prediction is 30 px further on: no match by prediction).
    last = walker(45)
    r = t.update(50, dets((last[0] - 81.0, last[1], last[2] - 81.0, last[3])))
    assert r.track_ids.tolist() == [2]


def test_the_last_observation_survives_a_checkpoint() -> None:
    t = Tracker(TrackingConfig())
    for f in range(0, 21):
        t.update(f, dets(walker(f)))
    t.update(30, dets())
    state = t.snapshot()
    assert state.obs == [list(map(float, walker(20)))]
    back = Tracker(TrackingConfig())
    back.restore(state)
    assert int(back.update(40, dets(walker(20, x0=106.0))).track_ids[0]) == 1
    # An older checkpoint (no last observations) restores with the state's boxes.
    old = Tracker(TrackingConfig())
    old.restore(state.model_copy(update={"obs": []}))
    assert len(old) == 1 and old.snapshot().obs != []


def _ahead_or_behind(cfg: TrackingConfig) -> list[int]:
    """A walker seen every 5th frame; at the next look two boxes as far from its
    prediction, one behind where it was last seen: the ids of (behind, ahead)."""
    t = Tracker(cfg)
    for f in range(0, 41, 5):
        t.update(f, dets(walker(f)))
    behind, ahead = walker(45, x0=50.0), walker(45, x0=150.0)
    return [int(i) for i in t.update(45, dets(behind, ahead)).track_ids]


def test_a_detection_behind_a_moving_track_costs_more() -> None:
    # Equal distances: without the direction term the tie goes to the first box.
    assert _ahead_or_behind(TrackingConfig(direction_weight=0.0)) == [1, 2]
    assert _ahead_or_behind(TrackingConfig()) == [2, 1]


def _person(cx: float, feet: float, height: float) -> tuple[float, float, float, float]:
    return (cx - height / 6, feet - height, cx + height / 6, feet)


def _near_hidden_far_seen(cfg: TrackingConfig) -> list[int]:
    """A near person (90 px tall) walking right and a far one (45 px) walking left, seen
    every 5th frame; at the look where their paths meet the near one is hidden and only a
    far-sized box is seen, nearer the near one's prediction than the far one's: its id."""
    t = Tracker(cfg)
    for f in range(0, 41, 5):
        t.update(f, dets(_person(100 + 6 * f, 300, 90), _person(500 - 3 * f, 280, 45)))
    return [int(i) for i in t.update(45, dets(_person(380, 285, 45))).track_ids]


def test_a_detection_of_another_size_costs_more() -> None:
    assert size_cost(np.array([[0, 0, 10, 40]]), np.array([[0, 0, 10, 40], [0, 0, 5, 20]])) == (
        pytest.approx(np.array([[0.0, np.log(2)]]))
    )
    # Without the size term the far person's box takes the near one's id (a swap).
    assert _near_hidden_far_seen(TrackingConfig(size_weight=0.0)) == [1]
    assert _near_hidden_far_seen(TrackingConfig()) == [2]


def test_an_answers_prediction_is_the_full_kalman_step() -> None:
    """`predict` and `uncertainty` take the state and position variance without the 8x8
    covariance products; they equal the full step `update` takes, at any gap."""
    t = Tracker(TrackingConfig())
    for f in range(0, 25, 3):
        t.update(f, dets(walker(f), walker(f, x0=500.0, vx=-4.0, y0=100.0), (300, 300, 340, 390)))
    for frame in (24, 25, 30, 60):
        got = t.predict(frame)
        x, p = t._predicted(frame)
        want = _sigma_of(x, p[:, 0, 0] + p[:, 1, 1])
        live = np.isin(t._ids, got.track_ids)
        assert len(got) and got.uncertainty == pytest.approx(want[live], rel=1e-6)
        cx = (got.boxes[:, 0] + got.boxes[:, 2]) / 2
        assert cx == pytest.approx(x[live, 0], abs=1e-3)
        assert t.uncertainty(frame) == pytest.approx(float(want.max()), rel=1e-6)
