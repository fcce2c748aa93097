"""The estimate of a camera's spacing: unchanged frames cost what the bursts measured."""

from __future__ import annotations

from pytest import approx
from strata.edge.tracking.estimate import (
    CodecLoss,
    Curves,
    Spacing,
    Span,
    Still,
    Tally,
    lower_bound,
)


def _curves(still: Still | None = None) -> Curves:
    curves = Curves(window=4)
    curves.add((1.0, 0.9, 0.8, 0.7), (1.0, 0.95, 0.9, 0.85), boxes=20)
    if still is not None:
        curves.add_still(still)
    return curves


def _score(span: Span, curves: Curves) -> Tally:
    t = Tally()
    assert t.add(span, curves)
    return t


# Bursts over an empty street: what the gate called unchanged had no box, nor its answer.
EMPTY = Still(frames=18, counting_sum=18.0)


def test_unmeasured_unchanged_frames_are_scored_at_the_curve_like_any() -> None:
    # 49 frames of an unchanged street, then the first frame of a passage: until the
    # bursts measured what an unchanged frame costs, the span is a gap of 50 (0 here)
    # with the passage's boxes spread over it.
    span = Span(50, 3.0 * 50 / 2, still=49)
    assert _score(span, _curves()).f1() == approx(0.0)
    assert _score(span, _curves()).f1() == _score(Span(50, 75.0), _curves()).f1()


def test_an_unchanged_empty_street_measured_empty_puts_no_box_in_the_span() -> None:
    curves = _curves(EMPTY)
    assert curves.still_missed == 0.0 and curves.still_match is None
    assert curves.still_counting == 1.0
    # The passage's first frame agrees by construction; the 49 frames before it hold no
    # box and miss none.
    t = _score(Span(50, 75.0, still=49, held=0.0), curves)
    assert t.f1() == approx(1.0) and t.f1_weight == approx(75.0 / 50)
    assert t.counting() == approx(1.0)


def test_measured_unchanged_frames_cost_what_was_measured() -> None:
    # Bursts scored 12 unchanged frames: 18 of 20 answered boxes matched, 22 detected.
    still = Still(frames=12, matched=18, detected=22, answered=20, counting_sum=11.4)
    curves = _curves(still)
    assert curves.still_match == approx(0.9) and curves.still_missed == approx(4 / 12)
    assert curves.still_counting == approx(0.95)
    # Gap 10, 6 of its frames unchanged (2 boxes held on each), the other 4 at the
    # curve's gap 4; 30 boxes in the span, 12 of them on the spaced frames.
    t = _score(Span(10, 30.0, still=6, held=12.0), curves)
    matched = 12 * 0.9
    detected = matched + 6 * 4 / 12
    assert t.f1_weight == approx(12 + (detected + 12) / 2)
    assert t.f1_sum == approx(12 * 0.7 + matched)
    assert t.counting() == approx((4 * 0.85 + 6 * 0.95) / 10)


def test_held_boxes_without_a_measured_share_fall_back_to_the_curve() -> None:
    # The bursts' unchanged frames were empty: nothing says how held boxes fare.
    t = _score(Span(10, 20.0, still=6, held=12.0), _curves(EMPTY))
    assert t.f1() == approx(0.1)  # the curve at 10, its loss grown on past gap 4


def test_a_gate_blind_to_the_objects_measures_badly_and_the_estimate_falls() -> None:
    # The real-daemon test's bursts: 6 of 50 answered boxes matched, 53 detected.
    blind = _curves(Still(frames=28, matched=6, detected=53, answered=50, counting_sum=20.0))
    f1 = _score(Span(12, 72.0, still=11, held=66.0), blind).f1()
    assert f1 is not None and f1 < 0.3
    # Blind on an empty street: people walk in, the answer holds nothing.
    walked_in = _curves(Still(frames=20, matched=0, detected=30, answered=0, counting_sum=5.0))
    f1 = _score(Span(50, 75.0, still=49, held=0.0), walked_in).f1()
    assert f1 is not None and f1 < 0.1


def test_spacing_counts_the_unchanged_frames_of_the_span_they_fall_in() -> None:
    s = Spacing()
    assert s.saw(100, 2, calibration=False) is None
    s.still(99)  # before the last kept frame: in no span
    for i in range(103, 110):
        s.still(i)
    span = s.saw(110, 4, calibration=False)
    assert span == Span(10, 10 * (2 + 4) / 2, still=7, held=14.0)
    assert s.window == [span] and s.stills == []
    # A span without unchanged frames is as before.
    assert s.saw(113, 4, calibration=False) == Span(3, 12.0)


def test_a_window_of_every_frame_is_measured_not_bounded() -> None:
    # Bursts too sparse to weigh (no box sample): spans of gap 1 were measured whole, and
    # their estimate is 1, not the bound on an empty sample (0).
    sparse = Curves(window=4)
    sparse.add((1.0, 0.5), (1.0, 0.5), boxes=0, frames=25)
    t = Tally()
    for _ in range(30):
        assert t.add(Span(1, 3.0), sparse)
    assert t.bounded(sparse.boxes, sparse.frames) == (approx(1.0), approx(1.0))


def test_only_the_part_scored_on_the_curves_is_bounded() -> None:
    curves = _curves()
    t = Tally()
    t.add(Span(1, 10.0), curves)
    t.add(Span(4, 10.0), curves)
    t.less(CodecLoss(f1=0.1, counting=0.0, boxes=50))
    f1, counting = t.bounded(curves.boxes, curves.frames)
    # Half the boxes measured (1 - 0.1), half at gap 4 (0.7 - 0.1) at its bound on 20 boxes.
    assert f1 == approx((10 * 0.9 + 10 * lower_bound(0.6, 20)) / 20)
    assert f1 is not None and f1 < t.f1() < 0.9
    # No frame sample behind the counting curve: the estimated part bounds to 0.
    assert counting == approx(1 / 5)
