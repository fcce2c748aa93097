"""`strata bench identities`' scoring: switches against the truth, their kinds, persistent
switches, IDF1, the two camera cuts."""

from __future__ import annotations

import numpy as np
from strata.tools.bench.identities import (
    CameraRun,
    TrackLife,
    View,
    _score,
    idf1,
    persistent,
    views,
)


def _b(x: float) -> list[float]:
    return [x, 0.0, x + 20.0, 60.0]


def test_views_are_the_left_and_right_60_percent() -> None:
    left, right = views(768)
    assert (left.x0, left.x1) == (0, 461) and (right.x0, right.x1) == (307, 768)


def test_a_handover_and_a_fragment_are_switches() -> None:
    run = CameraRun()
    last: dict[int, int] = {}
    truth = (np.array([_b(0), _b(100)], np.float32), np.array([1, 2]))
    for frame, ids, alive in (
        (0, [10, 11], {10, 11}),
        (1, [11, 10], {10, 11}),  # two tracks traded people
        (2, [12, 10], {10, 12}),  # truth 1 gets a new id, 11 gone
    ):
        for t in ids:
            run.tracks.setdefault(t, TrackLife(frame, frame))
        tracked = (truth[0], np.array(ids, np.uint64))
        _score(run, tracked, truth, last, alive)
    assert run.switches == 3 and run.handovers == 2 and run.fragments == 1
    assert run.seq[1] == [10, 11, 12]
    tp, nt, nh = idf1(run)
    assert (nt, nh) == (6, 6) and tp == 3  # best mapping: truth 2 -> 10 (2), truth 1 -> 11 (1)


def test_a_flicker_is_not_a_persistent_switch() -> None:
    assert persistent([1, 1, 2, 1, 1]) == 0
    assert persistent([1, 1, 2, 2]) == 1
    assert persistent([1, 2, 3]) == 0


def test_tracks_on_the_same_truth_box_at_once_are_seen_together() -> None:
    from strata.tools.bench.identities import seen_together

    runs = {"left": CameraRun(), "right": CameraRun()}
    truth = (np.array([_b(0)], np.float32), np.array([5]))
    for cam, track in (("left", 3), ("right", 8)):
        run = runs[cam]
        run.tracks[track] = TrackLife(0, 0)
        _score(run, (truth[0], np.array([track], np.uint64)), truth, {}, {track}, frame=10)
    runs["right"].at[(11, 6)] = 9  # another person, another frame: not with left's 3
    assert seen_together(runs) == {frozenset((("left", 3), ("right", 8)))}


def test_the_ceiling_links_a_reference_track_seen_by_both_cameras() -> None:
    """The real embedding model on the reference's own tracks: one person in the views'
    overlap (the same pixels in both) is linked; one seen by the left camera only is not."""
    from strata.edge.tracking.appearance import Embedder
    from strata.shared.config.appearance import AppearanceConfig
    from strata.shared.vision import FrameBoxes
    from strata.tools.bench.identities_ceiling import ceiling

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (160, 200, 3), dtype=np.uint8) for _ in range(10)]
    both, left = [90.0, 20.0, 110.0, 120.0], [10.0, 30.0, 30.0, 130.0]
    truth = [
        FrameBoxes(np.array([both, left], np.float32), np.ones(2, np.float32), np.array([1, 2]))
        for _ in images
    ]
    got = ceiling(images, truth, views(200), Embedder(AppearanceConfig()), every=2)
    assert got["tracks"] == 3 and got["truth_links"] == 1
    assert got["links"] == 1 and got["link_precision"] == 1.0 and got["link_recall"] == 1.0


def test_a_match_still_valid_is_kept_as_clear_mot_does() -> None:
    """CLEAR-MOT: truth 1 matched track 10; next frame track 10 still overlaps it at IoU
    0.6 and track 11 (a neighbour stepping in) at 1.0: no switch. Once 10 no longer
    overlaps it at 0.5, the match moves to 11 and that is a switch."""
    run = CameraRun()
    last: dict[int, int] = {}
    truth = (np.array([_b(0)], np.float32), np.array([1]))
    for t in (10, 11):
        run.tracks[t] = TrackLife(0, 0)
    _score(run, (np.array([_b(0)], np.float32), np.array([10], np.uint64)), truth, last, {10})
    near = np.array([_b(5), _b(0)], np.float32)  # 10 at IoU 0.6, 11 at 1.0
    _score(run, (near, np.array([10, 11], np.uint64)), truth, last, {10, 11})
    assert run.switches == 0 and last[1] == 10
    far = np.array([_b(12), _b(0)], np.float32)  # 10 at IoU 0.25
    _score(run, (far, np.array([10, 11], np.uint64)), truth, last, {10, 11})
    assert run.switches == 1 and last[1] == 11 and run.handovers == 1


def test_a_reference_id_that_jumps_to_someone_else_is_found_and_its_switch_counted() -> None:
    """The reference's id 1 walks 2 px a frame (no jump), then lands 100 px away (another
    person: a jump at frame 3); a camera switch across that frame is counted apart."""
    from strata.shared.vision import FrameBoxes
    from strata.tools.bench.identities import reference_jumps

    xs = [0.0, 2.0, 4.0, 104.0, 106.0]
    truth = [
        FrameBoxes(np.array([_b(x)], np.float32), np.ones(1, np.float32), np.array([1])) for x in xs
    ]
    jumps = reference_jumps(truth)
    assert list(jumps) == [1] and jumps[1].tolist() == [3]
    run = CameraRun(jumps=jumps)
    last: dict[int, int] = {}
    for f, track in ((0, 10), (2, 10), (4, 11)):
        run.tracks.setdefault(track, TrackLife(f, f))
        box = truth[f].boxes
        _score(run, (box, np.array([track], np.uint64)), (box, np.array([1])), last, {10, 11}, f)
    assert run.switches == 1 and run.at_jumps == 1


def test_a_switch_where_the_reference_itself_changed_person_is_told_apart() -> None:
    """The real embedding model: a switch whose two reference crops are the same pixels is
    not a change of the reference's person; one whose crops differ is, at a threshold
    below their distance."""
    from strata.edge.tracking.appearance import Embedder
    from strata.shared.config.appearance import AppearanceConfig
    from strata.tools.bench.identities_reference import reference_changed

    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (120, 200, 3), dtype=np.uint8)
    image[:, 100:] = 255 - image[:, 100:]  # the right half: someone else
    a = np.array([10.0, 10.0, 50.0, 110.0], np.float32)
    b = np.array([130.0, 10.0, 170.0, 110.0], np.float32)
    frames = [image, image]
    cam = View("whole", 0, 200)
    embedder = Embedder(AppearanceConfig())
    run = CameraRun()
    run.switch_boxes = [(0, a, 1, a), (0, a, 1, b)]
    assert reference_changed(frames, {cam.name: run}, [cam], embedder, same=0.01) == 1
