"""`strata bench cascade`: the cascade alone, over the real daemons, writes its keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def test_the_cascade_part_writes_the_synthetic_clips_keys(tmp_path: Path) -> None:
    out = tmp_path / "cascade.json"
    cmd = [sys.executable, "-m", "strata.tools.cli", "bench", "cascade", "--quick"]
    cmd += ["--out", str(tmp_path / "work"), "--json", str(out), "--uniform-through-codec"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "strata bench cascade " + " ".join(cmd[5:])
    assert list(doc["clips"]) == ["synthetic.mp4"]  # --quick leaves vtest out
    assert doc["cascade.f1"] is None
    assert doc["cascade_synthetic.frames_total"] == 30
    assert 0 < doc["cascade_synthetic.frames_to_edge"] <= 30
    for key in ("tagging", "counting", "f1", "object_recall", "uniform_f1"):
        assert 0 <= doc[f"cascade_synthetic.{key}"] <= 1, key
    assert doc["machine"]["cores"] >= 1
    # The third run: every frame through the cascade's JPEG, and uniform over it.
    clip = doc["clips"]["synthetic.mp4"]
    codec, uniform = clip["through_codec"], clip["uniform_through_codec"]
    assert codec["frames"] == 30 and 0 <= codec["f1"] <= 1, codec
    assert 0 <= uniform["f1"] <= 1 and uniform["frames"] == 30, uniform
    # Scored against the same reference boxes as the cascade (a COCO detector finds few
    # on the synthetic clip's shapes).
    ref_boxes = clip["vs_reference"]["true_positives"] + clip["vs_reference"]["false_negatives"]
    assert codec["true_positives"] + codec["false_negatives"] == ref_boxes
    verdict = clip["promise"]["not_worse_than_uniform_through_codec"]
    assert isinstance(verdict, bool) and clip["promise"]["codec_f1"] == round(codec["f1"], 4)


def test_uniform_through_codec_refuses_h264() -> None:
    cmd = [sys.executable, "-m", "strata.tools.cli", "bench", "cascade", "--quick"]
    cmd += ["--encoding", "h264", "--uniform-through-codec"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not --encoding h264" in proc.stdout + proc.stderr
