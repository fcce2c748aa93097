"""The estimate of a camera's spacing: frames the motion gate found unchanged cost nothing."""

from __future__ import annotations

from pytest import approx
from strata.edge.tracking.estimate import Curves, Spacing, Span, Tally


def _curves() -> Curves:
    curves = Curves(window=4)
    curves.add((1.0, 0.9, 0.8, 0.7), (1.0, 0.95, 0.9, 0.85), boxes=20)
    return curves


def test_a_span_of_unchanged_frames_ending_on_a_passage_agrees() -> None:
    # 49 frames of an unchanged empty street, then the first frame of a passage: nothing
    # in the span was spaced, whatever its length (it was scored at gap 50: 0 here).
    span = Span(50, 3.0, still=49, still_boxes=0.0)
    t = Tally()
    assert t.add(span, Curves(window=4))  # no curve needed: nothing to score on one
    assert t.f1() == 1.0 and t.counting() == 1.0
    plain = Tally()
    assert plain.add(Span(50, 3.0 * 50 / 2), _curves())
    assert plain.f1() == approx(0.0)


def test_the_spaced_part_is_scored_at_the_gap_without_the_still_frames() -> None:
    # Gap 10: 6 frames unchanged (2 boxes each, the last kept frame's), 4 spaced.
    span = Span(10, 4 * 2.0 + 12.0, still=6, still_boxes=12.0)
    t = Tally()
    assert t.add(span, _curves())
    assert t.f1() == approx((8.0 * 0.7 + 12.0) / 20.0)
    assert t.counting() == approx((4 * 0.85 + 6) / 10)


def test_spacing_counts_the_still_frames_of_the_span_they_fall_in() -> None:
    s = Spacing()
    assert s.saw(100, 2, calibration=False) is None
    s.still(99)  # before the last kept frame: in no span
    for i in range(103, 110):
        s.still(i)
    span = s.saw(110, 4, calibration=False)
    # Frames 101-102 spaced, 103-109 unchanged (2 boxes held), 110 kept.
    assert span == Span(10, 3 * (2 + 4) / 2 + 7 * 2, still=7, still_boxes=14.0)
    assert s.window == [span] and s.stills == []
    # A span without still frames is as before.
    assert s.saw(113, 4, calibration=False) == Span(3, 12.0)
