"""strata bench's cost section: the cascade against every frame, per camera per day."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.shared.config.common import CostConfig
from strata.shared.synthetic import SyntheticClip
from strata.shared.vision.agreement import Agreement
from strata.tools.bench.cascade import ClipResult
from strata.tools.bench.cost import bench_cost, clip_fps, markdown
from strata.tools.bench.tiers import TierRun


def _clip() -> ClipResult:
    a = Agreement(100, 0.9, 0.8, 0.7, 7, 3, 3)
    # 100 frames at 10 fps = 10 s; 40 kept; 5 reached the cloud; 100 kB source, 20 kB out.
    return ClipResult("c.mp4", 100, 40, 5, 100_000, 50_000.0, 20_000.0, a, a, a)


def test_cost_section_prices_the_cascade_against_every_frame() -> None:
    runs = {
        "edge": TierRun(
            "edge",
            ["x"],
            {"backend": "onnxruntime-cpu", "sweep": [{"bare_fps": 50.0}, {"bare_fps": 100.0}]},
        ),
        "cloud": TierRun("cloud", ["x"], {"bare_ips": 20.0}),
    }
    prices = CostConfig(gpu_per_hour=3.6, egress_per_gb=0.1, storage_per_gb_month=0.0)
    doc = bench_cost(runs, [_clip()], {"c.mp4": 10.0}, prices)
    row = doc["per_camera_per_day"]["c.mp4"]
    # Detector at its best bare rate, 100 frames/s: 0.01 s a frame, 0.1 GPU-s per second.
    assert row["detector_s_per_frame"] == 0.01
    assert row["every_frame_edge_gpu"]["total"] == pytest.approx(2.4 * 3.6, rel=1e-3)
    # Cascade: 40 % of the frames + 0.5 crops/s x 0.05 s, 2 kB/s out.
    gpu = (0.4 * 0.1 + 0.5 * 0.05) * 86400 / 3600 * 3.6
    assert row["cascade"]["gpu"] == pytest.approx(gpu, rel=1e-3)
    assert row["cascade"]["egress"] == pytest.approx(0.1728 * 0.1, abs=1e-4)
    assert row["every_frame_cloud_gpu"]["egress"] == pytest.approx(0.864 * 0.1, abs=1e-4)
    assert row["saving_vs_every_frame"] == pytest.approx(
        1 - row["cascade"]["total"] / row["every_frame_edge_gpu"]["total"], abs=1e-3
    )
    text = "\n".join(markdown(doc))
    assert "## Cost per camera per day (USD" in text and "| c.mp4 (10 fps, 40% kept)" in text
    assert doc["detector_backend"] == "onnxruntime-cpu" and doc["notes"] == []


def test_without_tier_benchmarks_it_says_what_it_used() -> None:
    doc = bench_cost({}, [_clip()], {"c.mp4": 10.0})
    assert any("no edge benchmark" in n for n in doc["notes"])
    assert any("no cloud benchmark" in n for n in doc["notes"])


def test_clip_fps_reads_the_clip(tmp_path: Path) -> None:
    clip = SyntheticClip(width=64, height=64, frames=5, fps=12, objects=1, seed=0)
    assert clip_fps(clip.write(tmp_path / "c.mp4")) == pytest.approx(12.0)
