"""One cloud look per object: crops per track, parked objects not re-sent, capped."""

from __future__ import annotations

import numpy as np
from strata.edge.publish.crops import CropSelector
from strata.edge.tracking.tracker import TrackedBoxes
from strata.shared.config.edge import CropsConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes


def frame(xs: list[float], ids: list[int], score: float = 0.4) -> tuple[FrameBoxes, TrackedBoxes]:
    b = np.array([[x, 100.0, x + 30.0, 190.0] for x in xs], np.float32).reshape(-1, 4)
    n = len(xs)
    s = np.full(n, score, np.float32)
    c = np.zeros(n, np.int32)
    fb = FrameBoxes(b, s, c)
    return fb, TrackedBoxes(b, s, c, np.array(ids, np.uint64), np.zeros(n, np.float32), False)


def header(t_s: float) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(camera_id="cam", session_id=1, capture_ns=int(t_s * 1e9))


def test_parked_object_gets_one_look_a_walker_a_few_an_untracked_one_every_frame() -> None:
    sel = CropSelector(CropsConfig(track_interval_s=5.0, max_per_track=3), ["person"], "e")
    sent: dict[int, int] = {}
    for t in range(1, 61):
        # Track 1 parked at x=10; track 2 walks 5 px per second; one untracked box.
        fb, tb = frame([10.0, 100.0 + 5.0 * t, 500.0], [1, 2, 0])
        for i in sel.select(fb, tb, header(float(t))).tolist():
            sent[int(tb.track_ids[i])] = sent.get(int(tb.track_ids[i]), 0) + 1
    assert sent[1] == 1
    assert sent[2] == 3  # capped (it would move enough every 10 s)
    assert sent[0] == 60
    assert sel.looks.skipped_parked > 0 and sel.looks.skipped_cap > 0


def test_outside_the_band_or_over_the_frame_limit_is_not_recorded_as_sent() -> None:
    sel = CropSelector(CropsConfig(max_per_frame=1), ["person"], "e")
    fb, tb = frame([10.0, 200.0], [1, 2], score=0.9)
    assert sel.select(fb, tb, header(0.0)).size == 0
    fb, tb = frame([10.0, 200.0], [1, 2])
    first = sel.select(fb, tb, header(1.0)).tolist()
    second = sel.select(fb, tb, header(2.0)).tolist()
    assert len(first) == len(second) == 1 and first != second
    # Without track data: the per-frame rule.
    assert sel.select(fb).size == 1


def test_a_track_the_rules_call_stationary_gets_no_look_until_it_moves() -> None:
    still: set[tuple[str, int]] = {("cam", 1)}
    sel = CropSelector(
        CropsConfig(track_interval_s=0.0, track_change_iou=1.0),
        ["person"],
        "e",
        stationary=lambda cam, tid: (cam, tid) in still,
    )
    fb, tb = frame([10.0, 200.0], [1, 2])
    assert tb.track_ids[sel.select(fb, tb, header(1.0))].tolist() == [2]
    assert sel.looks.skipped_stationary == 1
    still.clear()  # it moved (the rules said active)
    fb, tb = frame([60.0, 250.0], [1, 2])
    assert sorted(tb.track_ids[sel.select(fb, tb, header(2.0))].tolist()) == [1, 2]
