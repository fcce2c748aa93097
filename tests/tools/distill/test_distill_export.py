"""`strata models distill` end to end on a tiny clip with a tiny budget (export extra)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("timm")
pytest.importorskip("ultralytics")

from strata.shared.models import ModelRepository
from strata.shared.synthetic import SyntheticClip
from strata.tools.cli import main

pytestmark = [pytest.mark.export, pytest.mark.slow]


def test_distill_writes_three_scored_models(tmp_path: Path) -> None:
    clip = SyntheticClip(width=256, height=192, frames=60, fps=10, objects=4, seed=2).write(
        tmp_path / "clip.mp4"
    )
    repo = tmp_path / "repo"
    rc = main(
        [
            "models", "distill", str(clip), "--into", str(repo), "--teachers", "motion",
            "--holdout", "0.3", "--student-epochs", "1", "--imgsz", "64",
            "--student-batch", "4", "--gate-size", "64", "--gate-epochs", "1",
            "--verifier-epochs", "1", "--verifier-stride", "4", "--max-steps", "2",
            "--speed-frames", "2",
        ]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((repo / "distill.json").read_text())
    assert report["clips"][0]["holdout_start"] == 42
    assert report["detector"]["heldout"]["frames"] == 18
    assert report["detector"]["speed"]["student_ms"] > 0
    assert report["detector"]["speed"]["hog_ms"] > 0
    for part in ("gate", "verifier"):
        acc = report[part]["heldout_accuracy_onnx"]
        assert acc is None or 0.0 <= acc <= 1.0
    models = ModelRepository(repo)
    assert sorted(models.names()) == ["mobilenetv3_small", "swin", "yolov8n"]
    expect = {
        "yolov8n": ("person",),
        "mobilenetv3_small": ("nothing", "something"),
        "swin": ("not_person", "person"),
    }
    for name, labels in expect.items():
        m = models.manifest(name)
        assert m.labels == labels and m.source.trained
        assert "strata models distill" in m.source.notes
        card = (repo / name / "MODEL_CARD.md").read_text()
        assert "## Held-out scores" in card and "## Limits" in card
        loaded = models.open(name)
        try:
            shape = loaded.manifest.input.shape
            out = loaded.runner.run(np.zeros((1, *shape[1:]), np.float32))[0]  # type: ignore[misc]
            assert out.shape[0] == 1
        finally:
            loaded.close()
    # Re-running one part keeps the others' report.
    rc = main(
        [
            "models", "distill", str(clip), "--into", str(repo), "--teachers", "motion",
            "--holdout", "0.3", "--parts", "gate", "--gate-size", "64", "--gate-epochs", "1",
            "--max-steps", "1",
        ]
    )  # fmt: skip
    assert rc == 0
    again = json.loads((repo / "distill.json").read_text())
    assert again["detector"] == report["detector"]


def test_distill_refuses_a_missing_clip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["models", "distill", str(tmp_path / "nope.mp4"), "--into", str(tmp_path / "r")])
    assert rc == 2
    assert "no such clip" in capsys.readouterr().err
