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
    cmd += ["--out", str(tmp_path / "work"), "--json", str(out)]
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
