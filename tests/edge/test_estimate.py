"""The estimate of a camera's spacing: unchanged frames cost what the bursts measured."""

from __future__ import annotations

from pytest import approx
from strata.edge.tracking.estimate import Curves, Spacing, Span, Still, Tally


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


def test_unmeasured_unchanged_frames_are_scored_at_the_curve_like_any() -> None:
    # 49 frames of an unchanged street, then the first frame of a passage: until the
    # bursts measured what an unchanged frame costs, the span is a gap of 50 (0 here).
    span = Span(50, 3.0 * 50 / 2, still=49)
    assert _score(span, _curves()).f1() == approx(0.0)
    assert _score(span, _curves()).f1() == _score(Span(50, 75.0), _curves()).f1()


def test_measured_unchanged_frames_cost_what_was_measured() -> None:
    # Bursts scored 12 unchanged frames: 18 boxes matched of 20 detected and 20 answered.
    still = Still(frames=12, matched=18, detected=20, answered=20, counting_sum=11.4)
    curves = _curves(still)
    assert curves.still_f1 == approx(0.9) and curves.still_counting == approx(0.95)
    # Gap 10, 6 of its frames unchanged: they at 0.9, the other 4 at the curve's gap 4.
    t = _score(Span(10, 20.0, still=6), curves)
    assert t.f1() == approx((4 * 0.7 + 6 * 0.9) / 10)
    assert t.counting() == approx((4 * 0.85 + 6 * 0.95) / 10)
    # The passage after an unchanged street: its first frame agrees by construction.
    assert _score(Span(50, 75.0, still=49), curves).f1() == approx((1 + 49 * 0.9) / 50)


def test_a_gate_blind_to_the_objects_measures_badly_and_the_estimate_falls() -> None:
    blind = _curves(Still(frames=28, matched=6, detected=53, answered=50, counting_sum=20.0))
    t = _score(Span(12, 72.0, still=11), blind)
    f1 = t.f1()
    assert f1 is not None and f1 < 0.2


def test_too_few_unchanged_boxes_measure_nothing() -> None:
    # An empty street's unchanged frames agree on counting but say nothing of F1.
    curves = _curves(Still(frames=18, counting_sum=18.0))
    assert curves.still_f1 is None and curves.still_counting == 1.0
    t = _score(Span(50, 75.0, still=49), curves)
    assert t.f1() == approx(0.0) and t.counting() == approx(1.0 / 50 + 49 / 50)
    few = _curves(Still(frames=3, matched=2, detected=3, answered=3, counting_sum=3.0))
    assert few.still_f1 is None and few.still_counting is None


def test_spacing_counts_the_unchanged_frames_of_the_span_they_fall_in() -> None:
    s = Spacing()
    assert s.saw(100, 2, calibration=False) is None
    s.still(99)  # before the last kept frame: in no span
    for i in range(103, 110):
        s.still(i)
    span = s.saw(110, 4, calibration=False)
    assert span == Span(10, 10 * (2 + 4) / 2, still=7)
    assert s.window == [span] and s.stills == []
    # A span without unchanged frames is as before.
    assert s.saw(113, 4, calibration=False) == Span(3, 12.0)
