"""`strata bench`: report assembly, and the cascade over the real daemons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from strata.shared.vision.agreement import Agreement
from strata.tools.bench import report
from strata.tools.bench.cascade import ClipResult
from strata.tools.bench.tiers import TierRun, first_number, lookup


def clip_result() -> ClipResult:
    a = Agreement(10, 0.9, 0.8, 0.7, 7, 3, 3)
    return ClipResult("vtest.mp4", 10, 6, 2, 1000, 500.0, 50.0, a, a, a)


def test_report_keys_come_from_tier_json() -> None:
    runs = {
        "device": TierRun(
            "device",
            ["x"],
            {
                "decode_fps": 100,
                "decode_bgr_fps": 80,
                "agent_fps": 90,
                "ratio": 0.9,
                "ratio_vs_decode_bgr": 1.125,
            },
        ),
        "edge": TierRun(
            "edge",
            ["x"],
            {"bare_fps": 5, "node_fps": 4.5, "ratio": 0.9, "p50_ms": 10, "p99_ms": 20},
        ),
        "cloud": TierRun("cloud", ["x"], error="exit status 1"),
    }
    rep = report.build({"cpu": "x", "cores": 2, "gpu": "none"}, runs, [clip_result()], {}, True)
    assert rep["device.ratio"] == 0.9 and rep["device"]["ratio"] == 0.9
    assert rep["edge.p99_ms"] == 20
    assert rep["cascade.frames_to_edge"] == 6 and rep["cascade.f1"] == 0.7
    assert rep["cascade.frames_not_sent"] == 0.4 and rep["cascade.bytes_ratio"] == 0.5
    missing = [k for k in report.REQUIRED if k.startswith("cloud.")]
    missing += ["cascade.uniform_f1", "cascade.uniform_counting", "cascade.stale_f1"]
    assert rep["missing"] == missing
    md = report.markdown(rep, [clip_result()], "strata bench --quick")
    assert "cloud benchmark: exit status 1" in md and "| vtest.mp4 | 10 | 6 | 2 |" in md
    assert "PyAV decode + BGR of every frame | 80.00 | 90.00 | 1.125 |" in md
    json.dumps(rep)  # serialisable


def test_lookup_paths() -> None:
    data = {"a": {"b": 3}, "c": True, "d": "x"}
    assert lookup(data, "a.b") == 3 and lookup(data, "a.x") is None
    assert first_number(data, ("c", "d", "a.b")) == 3.0  # booleans and strings are not numbers


def test_meaning_says_when_the_reference_found_nothing() -> None:
    empty = Agreement(10, 1.0, 1.0, 1.0, 0, 0, 0)
    c = ClipResult("s.mp4", 10, 4, 0, 1, 1.0, 0.0, empty)
    assert any("found no objects" in line for line in report.meaning([c]))
    assert not any("found no objects" in line for line in report.meaning([clip_result()]))


@pytest.mark.slow
def test_bench_quick_writes_every_key(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "strata.tools.cli", "bench", "--quick", "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--skip", "ultralytics"], capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["missing"] == []
    for key in report.REQUIRED:
        if not key.startswith("cascade."):
            assert isinstance(rep[key], int | float) and not isinstance(rep[key], bool), key
    # --quick runs no vtest: the synthetic clip's figures have their own names.
    assert rep["cascade.f1"] is None
    assert rep["cascade_synthetic.frames_total"] == 30
    assert 0 < rep["cascade_synthetic.frames_to_edge"] <= 30
    assert rep["cascade_synthetic.bytes_to_edge"] > 0
    for key in ("tagging", "counting", "f1", "object_recall", "uniform_f1"):
        assert 0 <= rep[f"cascade_synthetic.{key}"] <= 1, key
    assert 0 <= rep["device.ratio"] <= 1.5
    truth = rep["clips"]["synthetic.mp4"]["vs_truth"]
    assert truth["frames"] == 30 and 0 <= truth["f1"] <= 1
    assert rep["machine"]["cores"] >= 1 and rep["machine"]["cpu"]
    assert "Cascade" in (out / "report.md").read_text()
    # The detector is named (the starter one by default), and the cascade's promise said.
    assert rep["detector"]["name"] == "picodet_s_416"
    assert rep["detector"]["input_size"] == [416, 416]
    assert "promise" in rep["clips"]["synthetic.mp4"]
    assert "The cascade's promise per clip" in (out / "report.md").read_text()
    for name in rep["plots"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "kept_vs_motion_threshold.png" in rep["plots"]


def test_ultralytics_side_by_side_or_a_clear_none(tmp_path: Path) -> None:
    import importlib.util

    from strata.shared.synthetic import SyntheticClip
    from strata.tools.bench.side_by_side import ultralytics_side_by_side

    clip = SyntheticClip(width=160, height=120, frames=3, seed=0).write(tmp_path / "c.mp4")
    got = ultralytics_side_by_side(clip, 1.0, sys.executable, 2, timeout_s=280)
    if importlib.util.find_spec("ultralytics") is None:
        assert got is None  # no export extra here: the bench says so and goes on
    else:
        assert got is not None and got["frames"] == 3 and got["batch"] == 2
        assert got["ultralytics_fps"] > 0 and got["ultralytics_fps_batch1"] > 0


def test_plots_say_clearly_when_matplotlib_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    from strata.tools.bench import plots

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".", maxsplit=1)[0] == "matplotlib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    data = plots.PlotData(latency_ms={"x": [1.0, 2.0]})
    written, notes = plots.write_all(data, tmp_path)
    assert written == [] and "matplotlib is not installed" in notes[0]
    monkeypatch.undo()
    written, notes = plots.write_all(data, tmp_path)
    assert [p.name for p in written] == ["latency_cdf.png"]
    assert "throughput_vs_batch.png: no data" in notes


def test_a_missing_tier_benchmark_is_named(tmp_path: Path) -> None:
    from strata.tools.bench.tiers import run_tier

    run = run_tier("nosuchtier", tmp_path, quick=True, timeout_s=60)
    assert run.error == "strata bench has no part 'nosuchtier'"
    assert run.data == {}
