"""Placement of kept frames at a fixed budget: uniform, track risk, clairvoyant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from strata.edge.tracking.calibration import uniform
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes
from strata.tools.bench.placement import (
    clairvoyant,
    compare,
    load_reference,
    save_reference,
    score,
    track_risk,
)

CFG = TrackingConfig(answer="interpolate")
SIZE = (640, 480)


def box(x: float, y: float = 200.0) -> list[float]:
    return [x, y, x + 30.0, y + 90.0]


def turning(n: int = 40) -> list[FrameBoxes]:
    """One walker going right at 4 px a frame until frame 20, then back: interpolation
    across the turn errs, a kept frame at the turn fixes it."""
    out = []
    for i in range(n):
        x = 100.0 + 4.0 * (i if i <= 20 else 40 - i)
        out.append(FrameBoxes.of(np.array([box(x)], np.float32), np.zeros(1, np.int32)))
    return out


def test_clairvoyant_keeps_the_turn_and_beats_uniform() -> None:
    ref = turning()
    kept = clairvoyant(ref, CFG, budget=0.0)
    assert kept[0] and kept[-1]
    # No wrong box allowed: a frame at or next to the turn is kept, long gaps elsewhere.
    assert kept[19:22].any()
    assert kept.sum() <= 8
    f1, _ = score(ref, kept, CFG, SIZE)
    uniform_f1, _ = score(ref, uniform(len(ref), float(kept.mean())), CFG, SIZE)
    assert f1 == 1.0 and uniform_f1 < 1.0


def test_track_risk_keeps_a_frame_before_two_walkers_meet() -> None:
    # Two walkers head for each other (6 px a frame each) and meet near frame 25.
    ref = []
    for i in range(40):
        a, b = 100.0 + 6.0 * i, 400.0 - 6.0 * i
        ref.append(FrameBoxes.of(np.array([box(a), box(b)], np.float32), np.zeros(2, np.int32)))
    calm = track_risk(ref, CFG, SIZE, gmin=2, gmax=10, close=0.0, border=0.0)
    wary = track_risk(ref, CFG, SIZE, gmin=2, gmax=10, close=0.5, border=0.0)
    # Without the risk rule, every 10th frame; with it, more frames as they close in.
    assert np.flatnonzero(calm).tolist() == [0, 10, 20, 30]
    assert wary.sum() > calm.sum()
    close_in = np.flatnonzero(wary)
    assert np.diff(close_in[(close_in >= 10) & (close_in <= 30)]).min() <= 3


def test_compare_and_the_reference_file(tmp_path: Path) -> None:
    ref = turning()
    path = tmp_path / "reference.npz"
    save_reference(path, ref, SIZE)
    back, size = load_reference(path)
    assert size == SIZE and len(back) == len(ref)
    assert np.array_equal(back[7].boxes, ref[7].boxes)
    rows = compare(back, size, budgets=(0.2,))
    names = [r.name for r in rows]
    assert names[0] == "uniform" and names[-1] == "clairvoyant"
    oracle = rows[-1]
    assert oracle.f1 >= oracle.uniform_f1
