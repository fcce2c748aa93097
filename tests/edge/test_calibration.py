"""Online calibration: a burst replayed at every gap, fed back for the agent's next ack."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
from pytest import approx
from strata.edge.tracking.calibration import (
    Calibration,
    Estimate,
    measure_gaps,
    measure_still,
    uniform,
)
from strata.edge.tracking.estimate import Curves, Span, Tally, lower_bound
from strata.shared.config.edge import TrackingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.vision import FrameBoxes


def scene(i: int, speed: float) -> FrameBoxes:
    """Two people walking at `speed` px/frame, one appearing at frame 22."""
    xs = [100.0 + speed * i] + ([400.0 - speed * (i - 22)] if i >= 22 else [])
    b = np.array([[x, 200.0, x + 30.0, 290.0] for x in xs], np.float32)
    return FrameBoxes(b, np.full(len(xs), 0.9, np.float32), np.zeros(len(xs), np.int32))


def test_gaps_cost_more_when_objects_move_faster() -> None:
    slow = measure_gaps([scene(i, 1.0) for i in range(40)], TrackingConfig(), 640, 480, 8)
    fast = measure_gaps([scene(i, 12.0) for i in range(40)], TrackingConfig(), 640, 480, 8)
    assert slow.f1[0] == fast.f1[0] == 1.0
    assert len(slow.f1) == len(slow.counting) == 8 and slow.frames == 35
    # A new object is missed until the next kept frame: long gaps cost even when slow.
    assert slow.f1[7] < 1.0
    assert sum(fast.f1) < sum(slow.f1)


def test_uniform_keeps_the_fraction() -> None:
    assert uniform(100, 0.2).sum() == 20
    assert uniform(100, 0.4).sum() == 40
    assert uniform(10, 0).sum() == 0


def head(i: int, calibration: bool) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        camera_id="cam",
        session_id=3,
        frame_index=i,
        width=640,
        height=480,
        calibration=calibration,
    )


def test_burst_end_produces_feedback_once() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            assert cal.detected(head(i, True), scene(i, 4.0)) is None
        assert cal.take_feedback(3, "cam") is None
        future = cal.detected(head(40, False), scene(40, 4.0))
        assert future is not None
        acc = future.result(timeout=30)
        assert acc is not None and len(acc.f1) == 6
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and list(fb.f1_by_gap) == list(np.float32(acc.f1))
        assert cal.take_feedback(3, "cam") is None
        # A burst too short to measure gives no feedback.
        for i in range(50, 53):
            cal.detected(head(i, True), scene(i, 4.0))
        short = cal.detected(head(60, False), scene(60, 4.0))
        assert short is not None and short.result(timeout=30) is None
    finally:
        cal.close()


def test_a_scene_change_drops_the_old_scenes_burst_and_feedback() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            cal.detected(head(i, True), scene(i, 4.0))
        future = cal.detected(head(30, False), scene(30, 4.0))
        assert future is not None and future.result(timeout=30) is not None
        # A burst under way when the cut comes is dropped, and so is the feedback waiting.
        for i in range(40, 50):
            cal.detected(head(i, True), scene(i, 4.0))
        cut = head(50, True)
        cut.scene_change = True
        assert cal.detected(cut, scene(50, 4.0)) is None
        assert cal.take_feedback(3, "cam") is None
        # The new burst starts at the cut: 1 frame + 3 is too short to measure.
        for i in range(51, 54):
            cal.detected(head(i, True), scene(i, 4.0))
        short = cal.detected(head(60, False), scene(60, 4.0))
        assert short is not None and short.result(timeout=30) is None
    finally:
        cal.close()


def _tally(curves: Curves, *spans: Span) -> Tally:
    t = Tally()
    for span in spans:
        assert t.add(span, curves)
    return t


def test_the_estimate_weighs_counting_by_frames_and_f1_by_boxes() -> None:
    curves = Curves(window=4)
    curves.add((1.0, 0.9, 0.8), (1.0, 0.9, 0.8), boxes=10)
    curves.add((1.0, 0.7, 0.6), (1.0, 0.7, 0.6), boxes=10)
    assert _tally(curves, Span(2, 4.0)).f1() == approx(0.8)
    # Counting: 1 frame at 1.0, 3 frames at the mean 0.7; past the curve: its end.
    t = _tally(curves, Span(1, 0.0), Span(3, 6.0))
    assert t.counting() == approx((1.0 + 3 * 0.7) / 4)
    # F1: only the span with boxes counts.
    assert t.f1() == approx(0.7)
    # Past the curve: its loss grows on linearly (0.3 over 2 gaps), to 0 at worst.
    assert _tally(curves, Span(4, 2.0)).f1() == approx(0.55)
    assert _tally(curves, Span(9, 2.0)).f1() == approx(0.0)
    # No box anywhere: no F1 estimate, a counting one.
    empty = _tally(curves, Span(3, 0.0))
    assert empty.f1() is None and empty.counting() == approx(0.7)
    assert Tally().f1() is None and Tally().counting() is None


def test_a_burst_over_an_empty_street_does_not_lift_the_f1_estimate() -> None:
    curves = Curves(window=4)
    curves.add((1.0, 0.8, 0.6), (1.0, 0.8, 0.6), boxes=50)
    curves.add((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), boxes=0)
    assert curves.f1 is not None and curves.f1.tolist() == approx([1.0, 0.8, 0.6])
    # Counting is a mean over frames: the empty street's frames count.
    assert curves.counting is not None and curves.counting.tolist() == approx([1.0, 0.9, 0.8])
    only_empty = Curves(window=4)
    only_empty.add((1.0, 1.0), (1.0, 1.0), boxes=0)
    assert only_empty.f1 is None
    # A span with boxes cannot be scored on it, a gap of 1 always can (every frame detected).
    assert not Tally().add(Span(2, 3.0), only_empty)
    assert _tally(Curves(window=1), Span(1, 2.0)).f1() == 1.0


def feed(cal: Calibration, frames: range, calibration: bool, step: int = 1) -> object:
    """Detected frames `frames[::step]`; the last future returned (a burst's end)."""
    out = None
    for i in frames[::step]:
        out = cal.detected(head(i, calibration), scene(i, 6.0)) or out
    return out


def test_the_estimate_is_the_replay_at_the_gap_in_use() -> None:
    seen: list[Estimate] = []
    cal = Calibration(TrackingConfig(), max_gap=6, window=1, on_estimate=seen.append)
    try:
        # The first burst: no spacing seen before it, so no estimate.
        feed(cal, range(0, 30), True)
        first = feed(cal, range(32, 90), False, step=3)
        assert isinstance(first, Future) and first.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and not fb.HasField("estimated_accuracy") and not seen
        # The device keeps 1 frame in 3, then bursts again: the estimate is that burst's
        # replay at gap 3.
        feed(cal, range(90, 120), True)
        end = feed(cal, range(122, 130), False, step=3)
        assert isinstance(end, Future)
        acc = end.result(timeout=30)
        assert acc is not None
        replayed = measure_gaps(
            [scene(i, 6.0) for i in range(90, 120)], TrackingConfig(), 640, 480, 6
        )
        assert replayed.f1 == acc.f1
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.HasField("estimated_accuracy")
        # Leaning low on one burst's sample: the lower bound on its boxes (frames).
        f1 = lower_bound(acc.f1[2], acc.boxes)
        assert fb.estimated_accuracy == approx(f1, abs=1e-6) and f1 < acc.f1[2]
        assert fb.estimated_counting == approx(lower_bound(acc.counting[2], acc.frames), abs=1e-6)
        assert acc.f1[2] < 1.0 and [e.f1 for e in seen] == [approx(f1)]
    finally:
        cal.close()


def test_the_estimate_smooths_over_the_window_of_bursts() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6, window=2)
    try:
        curves, boxes = [], []
        for start in (0, 100, 200):
            feed(cal, range(start, start + 30), True)
            end = feed(cal, range(start + 31, start + 100), False, step=2)
            assert isinstance(end, Future)
            acc = end.result(timeout=30)
            assert acc is not None
            curves.append(acc.f1)
            boxes.append(acc.boxes)
        fb = cal.take_feedback(3, "cam")
        assert fb is not None
        # The mean of the window's two bursts, as a lower bound on their boxes together.
        mean = (curves[1][1] + curves[2][1]) / 2
        assert fb.estimated_accuracy == approx(lower_bound(mean, boxes[1] + boxes[2]), abs=1e-6)
    finally:
        cal.close()


def test_an_empty_burst_sends_no_curves() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            cal.detected(head(i, True), FrameBoxes.empty())
        future = cal.detected(head(31, False), FrameBoxes.empty())
        assert future is not None
        acc = future.result(timeout=30)
        assert acc is not None and acc.boxes == 0 and acc.f1 == (1.0,) * 6
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and not fb.f1_by_gap and not fb.counting_by_gap
    finally:
        cal.close()


def test_the_run_is_scored_span_by_span_burst_frames_agreeing() -> None:
    scored: list[tuple[str, Tally]] = []
    cal = Calibration(TrackingConfig(), max_gap=6, on_scored=lambda cam, t: scored.append((cam, t)))
    try:
        feed(cal, range(0, 30), True)
        end = feed(cal, range(33, 90), False, step=3)
        assert isinstance(end, Future)
        acc = end.result(timeout=30)
        assert acc is not None
        run = Tally()
        for cam, t in scored:
            assert cam == "cam"
            run.f1_weight += t.f1_weight
            run.f1_sum += t.f1_sum
            run.counting_weight += t.counting_weight
            run.counting_sum += t.counting_sum
        # 29 burst frames (gap 1, agreeing), then a span of 4 frames and 18 of 3 at the
        # burst's accuracy at those gaps (scored once the burst was measured).
        assert run.counting_weight == 29 + 4 + 18 * 3
        want = (29 + 4 * acc.counting[3] + 54 * acc.counting[2]) / 87
        assert run.counting() == approx(want, abs=1e-6)
        f1 = run.f1()
        assert f1 is not None and acc.f1[3] < f1 < 1.0
    finally:
        cal.close()


def test_objects_after_empty_bursts_ask_for_a_burst_once() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            cal.detected(head(i, True), FrameBoxes.empty())
        end = cal.detected(head(40, False), FrameBoxes.empty())
        assert end is not None and end.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and not fb.burst_frames  # an empty street: nothing to ask
        # People: no burst saw any, so the edge asks for one, once.
        cal.detected(head(50, False), scene(50, 4.0))
        cal.detected(head(52, False), scene(52, 4.0))
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.burst_frames > 0
        cal.detected(head(54, False), scene(54, 4.0))
        assert cal.take_feedback(3, "cam") is None
        # The burst sees them: curves go back, and no more asking.
        feed(cal, range(55, 85), True)
        end = cal.detected(head(88, False), scene(88, 6.0))
        assert end is not None and end.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.f1_by_gap and not fb.burst_frames
        cal.detected(head(91, False), scene(91, 6.0))
        assert cal.take_feedback(3, "cam") is None
    finally:
        cal.close()


def test_a_burst_with_a_flicker_of_boxes_sends_no_curves() -> None:
    """3 boxes in 25 scored frames (a post the detector sees now and then): noise."""
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        for i in range(30):
            cal.detected(head(i, True), scene(i, 4.0) if i in (9, 17, 25) else FrameBoxes.empty())
        future = cal.detected(head(31, False), FrameBoxes.empty())
        assert future is not None
        acc = future.result(timeout=30)
        assert acc is not None and 0 < acc.boxes < acc.frames / 2
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and not fb.f1_by_gap and not fb.counting_by_gap
        # And it does not count as a burst that saw objects: people ask for one.
        cal.detected(head(33, False), scene(33, 4.0))
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.burst_frames > 0
    finally:
        cal.close()


def test_the_edge_asks_for_bursts_at_most_once_in_ten_max_gaps() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        cal.detected(head(0, False), scene(0, 4.0))
        first = cal.take_feedback(3, "cam")
        assert first is not None and first.burst_frames > 0
        # The device never sent the burst; a burst too short to measure ends the wait.
        for i in range(1, 4):
            cal.detected(head(i, True), scene(i, 4.0))
        short = cal.detected(head(5, False), scene(5, 4.0))
        assert short is not None and short.result(timeout=30) is None
        cal.detected(head(30, False), scene(30, 4.0))
        assert cal.take_feedback(3, "cam") is None  # 30 frames after: too soon
        cal.detected(head(60, False), scene(60, 4.0))
        again = cal.take_feedback(3, "cam")
        assert again is not None and again.burst_frames > 0  # 10 x max_gap later
    finally:
        cal.close()


def test_a_scene_change_does_not_ask_the_device_calibrates_it_anyway() -> None:
    cal = Calibration(TrackingConfig(), max_gap=6)
    try:
        cut = head(0, False)
        cut.scene_change = True
        cal.detected(cut, scene(0, 4.0))
        cal.detected(head(1, False), scene(1, 4.0))
        assert cal.take_feedback(3, "cam") is None
    finally:
        cal.close()


def test_the_frames_up_to_a_cut_stay_in_the_run_s_estimate() -> None:
    """A cut forgets the old scene's curves, but the span it ends (the old scene's frames)
    is scored on them first: dropped, a clip cut every few seconds is estimated on its
    bursts alone."""
    scored: list[Tally] = []
    cal = Calibration(TrackingConfig(), max_gap=6, on_scored=lambda cam, t: scored.append(t))
    try:
        feed(cal, range(0, 30), True)
        end = feed(cal, range(34, 50), False, step=4)
        assert isinstance(end, Future) and end.result(timeout=30) is not None
        cut = head(54, False)
        cut.scene_change = True
        cal.detected(cut, scene(54, 6.0))
        counted = sum(t.counting_weight for t in scored)
        # 29 burst frames, spans of 5, 4, 4, 4 (29 .. 46), and the 8 frames up to the cut.
        assert counted == 29 + 5 + 3 * 4 + 8
    finally:
        cal.close()


def _parked(i: int) -> FrameBoxes:
    """Two people standing still."""
    b = np.array([[100.0, 200.0, 130.0, 290.0], [400.0, 200.0, 430.0, 290.0]], np.float32)
    return FrameBoxes(b, np.full(2, 0.9, np.float32), np.zeros(2, np.int32))


def test_unchanged_burst_frames_are_scored_as_the_edge_answers_them() -> None:
    cfg = TrackingConfig(answer="interpolate")
    flags = [False] + [True] * 18 + [False]
    still = measure_still([_parked(i) for i in range(20)], flags, cfg, 640, 480)
    assert still.frames == 18 and still.matched == still.detected == still.answered == 36
    # A gate blind to people walking: what it calls unchanged is not (the answer of a
    # prediction from the burst's first frame, held, misses them).
    walking = [scene(i, 6.0) for i in range(20)]
    blind = measure_still(walking, flags, TrackingConfig(), 640, 480)
    assert blind.frames == 18 and blind.matched < blind.detected / 2
    # Frames the gate would have kept are detected, not scored.
    none = measure_still(walking, [False] * 20, cfg, 640, 480)
    assert none.frames == 0


def _window_estimate(speed: float, still_reason: str) -> float:
    """The second window's estimated F1 when bursts see people at `speed` px/frame that
    the gate calls unchanged, and the frames between kept ones were dropped for
    `still_reason`."""

    def people(i: int) -> FrameBoxes:
        return scene(i, speed) if speed else _parked(i)

    cal = Calibration(TrackingConfig(), max_gap=6, window=1)
    fut = None
    try:
        for start, end in ((0, 30), (90, 120)):
            for i in range(start, end):
                h = head(i, True)
                h.unchanged = i != start
                cal.detected(h, people(i))
            for i in range(end + 2, end + 60, 3):
                for j in (i - 2, i - 1):
                    h = head(j, False)
                    h.kind = frame_pb2.FRAME_KIND_SKIPPED
                    h.skip_reason = still_reason
                    cal.skipped(h)
                fut = cal.detected(head(i, False), people(i)) or fut
        assert isinstance(fut, Future) and fut.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.HasField("estimated_accuracy")
        return fb.estimated_accuracy
    finally:
        cal.close()


def test_frames_dropped_as_unchanged_cost_what_the_bursts_measured() -> None:
    # People standing still: unchanged frames agree, measured so; spaced frames cost the
    # curve's gap 3 (which agrees too, nothing moves).
    # (1.0 as a lower bound on the burst's 25 scored frames of 2 boxes.)
    assert _window_estimate(0.0, "motion") == approx(lower_bound(1.0, 50))
    # People walking that the gate calls unchanged: the bursts measured it, and the
    # estimate is lower than if the frames had been spaced by the gap alone.
    blind = _window_estimate(6.0, "motion")
    spaced = _window_estimate(6.0, "min_gap")
    assert blind < spaced < 1.0


def test_the_lower_bound_leans_low_on_few_samples_and_not_on_many() -> None:
    assert lower_bound(0.9, 0) == 0.0
    few, many = lower_bound(0.9, 20), lower_bound(0.9, 2000)
    assert few < 0.85 < many < 0.9
    assert lower_bound(1.0, 50) < 1.0 and lower_bound(0.0, 50) == 0.0


def test_the_tracker_counts_the_tracks_that_move() -> None:
    from strata.edge.tracking.tracker import Tracker

    t = Tracker(TrackingConfig())
    for i in range(6):
        walking = scene(i, 6.0)
        boxes = np.concatenate([walking.boxes[:1], _parked(i).boxes[:1]])
        t.update(i, FrameBoxes(boxes, np.full(2, 0.9, np.float32), np.zeros(2, np.int32)))
    assert len(t) == 2 and t.moving() == 1


def _codec_run(loss_boxes: bool) -> tuple[frame_pb2.CascadeFeedback, list[Tally]]:
    """Two bursts and the spacing between (as in the test above); with `loss_boxes`, codec
    probes first where the JPEG lost one box in four."""
    scored: list[Tally] = []
    cal = Calibration(
        TrackingConfig(), max_gap=6, window=1, on_scored=lambda _c, t: scored.append(t)
    )
    try:
        if loss_boxes:
            two = scene(30, 6.0)
            one = FrameBoxes(two.boxes[:1], two.scores[:1], two.class_ids[:1])
            for jpeg in (two, one, two, one):  # 8 raw boxes, 6 on the JPEGs, all matched
                cal.codec_probed("cam", two, jpeg)
            assert cal.codec_loss("cam").boxes == 8
        feed(cal, range(0, 30), True)
        first = feed(cal, range(32, 90), False, step=3)
        assert isinstance(first, Future) and first.result(timeout=30) is not None
        cal.take_feedback(3, "cam")
        feed(cal, range(90, 120), True)
        end = feed(cal, range(122, 130), False, step=3)
        assert isinstance(end, Future) and end.result(timeout=30) is not None
        fb = cal.take_feedback(3, "cam")
        assert fb is not None and fb.HasField("estimated_accuracy")
        return fb, scored
    finally:
        cal.close()


def test_what_the_codec_costs_comes_off_the_curves_and_the_estimates() -> None:
    plain, plain_scored = _codec_run(False)
    probed, probed_scored = _codec_run(True)
    # 8 raw boxes over the probes, 6 on the JPEGs, all 6 matched: F1 12 / 14.
    loss = 1.0 - 2 * 6 / (8 + 6)
    assert list(probed.f1_by_gap) == approx([max(0.0, v - loss) for v in plain.f1_by_gap])
    assert probed.estimated_accuracy < plain.estimated_accuracy - 0.1
    assert probed.estimated_counting < plain.estimated_counting
    # The device hears how many boxes the sample holds (it probes more under 8).
    assert (probed.codec_boxes, plain.codec_boxes) == (8, 0)
    assert plain.HasField("codec_boxes")
    # The run's estimate (the bench's) too, span by span.
    run = sum(t.f1_sum for t in probed_scored) / sum(t.f1_weight for t in probed_scored)
    base = sum(t.f1_sum for t in plain_scored) / sum(t.f1_weight for t in plain_scored)
    assert run == approx(base - loss, abs=1e-6)


def test_too_few_probed_boxes_leave_the_codec_out() -> None:
    cal = Calibration(TrackingConfig())
    try:
        two = scene(30, 6.0)
        none = FrameBoxes.empty()
        for _ in range(3):  # 6 boxes, all lost: under MIN_CODEC_BOXES
            loss = cal.codec_probed("cam", two, none)
        assert (loss.f1, loss.boxes) == (0.0, 6)
        assert cal.codec_probed("cam", two, none).f1 == approx(1.0)
        assert cal.codec_loss("other").boxes == 0
    finally:
        cal.close()


def test_a_burst_without_boxes_keeps_the_last_f1_curve_in_a_window_of_one() -> None:
    curves = Curves(window=1)
    curves.add((1.0, 0.8, 0.6), (1.0, 0.8, 0.6), boxes=50, frames=20)
    curves.add((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), boxes=0, frames=20)
    # The straggler's burst: its counting replaces the last, the F1 evidence stays.
    assert curves.f1 is not None and curves.f1.tolist() == approx([1.0, 0.8, 0.6])
    assert curves.boxes == 50 and curves.frames == 20
    assert _tally(curves, Span(3, 6.0)).f1() == approx(0.6)
