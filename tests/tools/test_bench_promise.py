"""The cascade bench's verdicts per clip: the target held or said so, the estimate against
the measure, the cascade against uniform spacing."""

from __future__ import annotations

import pytest
from strata.shared.vision.agreement import Agreement
from strata.tools.bench import report
from strata.tools.bench.cascade import ClipResult
from strata.tools.bench.promise import promise


def _a(f1: float, counting: float) -> Agreement:
    return Agreement(100, 1.0, counting, f1, 90, 5, 5)


def _clip(**kw: object) -> ClipResult:
    c = ClipResult("quiet-vtest.mp4", 1000, 100, 10, 1, 1.0, 1.0, _a(0.93, 0.95))
    c.uniform, c.uniform_double = _a(0.85, 0.88), _a(0.92, 0.94)
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def test_a_held_target_an_estimate_within_and_half_the_frames() -> None:
    p = promise(_clip(estimated_f1=0.95, detected_vs_reference=_a(0.97, 0.98)))
    assert p.sent_frames_f1 == pytest.approx(0.97) and "sent alone F1 0.970" in p.line()
    assert p.share == pytest.approx(0.1) and p.double_share == pytest.approx(0.2)
    assert p.target_held and p.kept_promise and not p.said_so
    assert p.estimate_error == pytest.approx(0.02) and p.estimate_within
    assert p.matches_with_half_the_frames and p.beats_at_the_same_share
    assert "held" in p.line() and "within 0.03" in p.line()
    # How many of the frames sent were calibration bursts'.
    cal = promise(_clip(calibration_kept=40))
    assert cal.calibration_kept == 40 and "(40 of 100 for calibration)" in cal.line()


def test_a_missed_target_is_kept_only_when_said_and_acted_on() -> None:
    missed = _clip(vs_reference=_a(0.80, 0.85), estimated_f1=0.7)
    p = promise(missed)
    assert not p.target_held and not p.said_so and not p.kept_promise
    assert not p.estimate_within and "MISSED SILENTLY" in p.line()
    assert not p.matches_with_half_the_frames and not p.beats_at_the_same_share
    said = promise(_clip(vs_reference=_a(0.80, 0.85), estimates_under_target=2, boosted_kept=40))
    assert said.said_so and said.kept_promise and "40 extra frames" in said.line()
    # Within the slack of the target: held.
    assert promise(_clip(vs_reference=_a(0.881, 0.9))).target_held


def test_the_report_carries_the_promise_per_clip() -> None:
    rep = report.build({"cores": 1}, {}, [_clip(estimated_f1=0.95)], {}, False)
    got = rep["clips"]["quiet-vtest.mp4"]["promise"]
    assert got["target_held"] is True and got["estimate_error"] == pytest.approx(0.02)
    assert got["matches_with_half_the_frames"] is True
    md = report.promise_markdown([_clip()], {"name": "m", "version": 2, "input_size": [320, 320]})
    assert "Detector: m version 2, input 320x320" in "\n".join(md)


def test_the_verdict_per_clip_and_uniform_at_the_same_share() -> None:
    """held / missed and said / missed silently (issue 41), and not worse than uniform at
    the same share by more than 0.01."""
    assert promise(_clip()).verdict == "held"
    said = promise(_clip(vs_reference=_a(0.80, 0.85), target_missed=0.07))
    assert said.verdict == "missed and said" and "missed by 0.070" in said.line()
    silent = promise(_clip(vs_reference=_a(0.80, 0.85)))
    assert silent.verdict == "missed silently"
    assert promise(_clip(vs_reference=_a(0.845, 0.875))).not_worse_than_uniform
    assert not promise(_clip(vs_reference=_a(0.835, 0.95))).not_worse_than_uniform
    assert promise(_clip(uniform=None)).not_worse_than_uniform is None


def test_uniform_through_the_codec_is_judged_beside_uniform_on_raw_frames() -> None:
    # The cascade (0.93) under uniform on raw frames (0.95) by more than the slack, but not
    # under uniform over the frames as its JPEG sends them (0.925).
    c = _clip(uniform=_a(0.95, 0.95), uniform_through_codec=_a(0.925, 0.94))
    c.through_codec = _a(0.96, 0.97)
    p = promise(c)
    assert not p.not_worse_than_uniform and p.not_worse_than_uniform_through_codec
    assert p.codec_f1 == pytest.approx(0.96) and p.uniform_codec_f1 == pytest.approx(0.925)
    assert "through the JPEG: every frame F1 0.960" in p.line()
    worse = promise(_clip(uniform_through_codec=_a(0.95, 0.94)))
    assert worse.not_worse_than_uniform_through_codec is False
    assert promise(_clip()).not_worse_than_uniform_through_codec is None
    assert "through the JPEG" not in promise(_clip()).line()
