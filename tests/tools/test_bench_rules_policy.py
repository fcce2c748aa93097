"""`strata bench rules-policy`: sampling policies replayed on a saved rules run."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from strata.edge.rules.camera_types import Need
from strata.tools.bench.rules import VTEST_RULES, Collected
from strata.tools.bench.rules_frames import Tracked
from strata.tools.bench.rules_policy import (
    AskSettings,
    Fixed,
    Scene,
    Spaced,
    add_arguments,
    compare_policies,
    hindsight,
    ideal_identities,
    load_scene,
    run,
    simulate,
    spaced,
)

NS = 1_000_000_000
SIZE = (768, 576)
FRAMES = 120


def _box(x: float) -> list[float]:
    return [x - 20, 260.0, x + 20, 345.0]


def _walkers(index: int) -> Tracked:
    """Two people on the path crossing both lines, one each way, at 10 fps."""
    right, left = 60.0 + 6.0 * index, 720.0 - 5.0 * index
    boxes = [_box(x) for x in (right, left) if 25 < x < SIZE[0] - 25]
    ids = [t for t, x in ((1, right), (2, left)) if 25 < x < SIZE[0] - 25]
    n = len(ids)
    return Tracked(
        index,
        index * NS // 10,
        np.array(boxes, np.float64).reshape(-1, 4),
        np.full(n, 0.9),
        np.zeros(n, np.int64),
        np.array(ids, np.uint64),
        True,
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rules-run")
    ref = [_walkers(i) for i in range(FRAMES)]
    Collected(ref, ref[::5], [], [], ("person",), SIZE, 10.0).save(folder)
    return folder


@pytest.fixture(scope="module")
def scene(saved: Path) -> Scene:
    return load_scene(saved, VTEST_RULES)


def test_the_scene_is_the_reference_tracked_again_with_its_rule_results(scene: Scene) -> None:
    assert len(scene) == FRAMES and scene.capture_ns[10] == NS
    # Each walker crosses both lines, in its own direction.
    assert sorted(str(h.key) for h in scene.reference if h.key.kind == "line_crossed") == [
        "line_crossed east in",
        "line_crossed east out",
        "line_crossed west in",
        "line_crossed west out",
    ]


def test_every_frame_kept_agrees_exactly_and_is_all_observed(scene: Scene) -> None:
    out = simulate(scene, Fixed(np.ones(len(scene), bool)))
    assert out.share == 1.0
    assert out.agreement.count_agreement == 1.0 and out.agreement.f1 == 1.0
    assert out.observed_share == 1.0


def test_one_frame_in_five_keeps_the_crossings_between_kept_frames(scene: Scene) -> None:
    out = simulate(scene, spaced(5, 0))
    assert out.share == pytest.approx(0.2)
    assert out.kept[::5].all() and out.kept.sum() == FRAMES // 5
    assert out.agreement.count_agreement == 1.0
    # Crossings between kept frames rest on answered (interpolated) positions.
    assert out.observed_share < 1.0


def test_an_ask_keeps_the_frame_its_latency_later_within_its_budget() -> None:
    p = Spaced(10, AskSettings(latency=2, budget=0.1, burst=1.0))
    kept = [i for i in range(12) if p.keep(i)]
    assert kept == [0, 10]
    p.detected(10, Need(line=True))  # the bucket filled: one ask
    p.detected(10, Need(line=True))  # none left
    assert p.asks == 1
    assert [i for i in range(12, 30) if p.keep(i)] == [12, 22]
    # A need for a reason the policy does not ask for asks nothing.
    q = Spaced(10, AskSettings(budget=1.0, reasons=("dwell",)))
    q.keep(0)
    q.detected(0, Need(line=True, zone=True))
    assert q.asks == 0


def test_perfect_identities_interpolate_by_track_id() -> None:
    frames = [_walkers(i) for i in range(11)]
    mask = np.zeros(11, bool)
    mask[[0, 10]] = True
    out = ideal_identities(frames, mask)
    assert out[0] is frames[0] and out[10] is frames[10]
    mid = out[4]
    assert not mid.detected and mid.track_ids.tolist() == [1, 2]
    assert np.allclose(mid.boxes, frames[4].boxes)
    # A track in one look only shows for the half of the gap nearest it.
    gone = [*frames[:10], Tracked(10, NS, frames[10].boxes[1:], *_one(frames[10]), True)]
    out = ideal_identities(gone, mask)
    assert out[4].track_ids.tolist() == [2, 1] and out[6].track_ids.tolist() == [2]
    # After the last kept frame nothing is known.
    first = np.arange(11) == 0
    assert ideal_identities(frames, first)[5].track_ids.size == 0


def _one(f: Tracked) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return f.scores[1:], f.class_ids[1:], f.track_ids[1:]


def test_hindsight_keeps_the_frames_of_the_reference_results(scene: Scene) -> None:
    mask = hindsight(scene, 0.2, 0, 0)
    for h in scene.reference:
        assert mask[scene.frame_of(h.time_s)]
    assert mask.mean() == pytest.approx(0.2, abs=0.03)


def test_the_comparison_and_the_part(
    scene: Scene, saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = compare_policies(scene, 0.2, 2)
    assert rows[0].policy.startswith("uniform") and rows[0].share == pytest.approx(0.2)
    assert all(0.0 <= r.count_agreement <= 1.0 and 0.0 <= r.f1 <= 1.0 for r in rows)
    p = argparse.ArgumentParser()
    add_arguments(p)
    out = tmp_path / "rows.json"
    args = p.parse_args(
        ["--from", str(saved), "--phases", "1", "--json", str(out), "--tracking", "{max_lost: 30}"]
    )
    assert run(args) == 0
    assert "| uniform 0.20 |" in capsys.readouterr().out
    assert '"policy": "uniform 0.20"' in out.read_text()
