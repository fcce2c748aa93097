"""`strata bench edge` runs end to end and writes the keys the bench runner reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_bench_writes_ratio_and_latency(colour_detector: Path, tmp_path: Path) -> None:
    out = tmp_path / "edge.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "strata.tools.cli",
            "bench",
            "edge",
            "--model",
            str(colour_detector),
            "--batch",
            "1,2",
            "--frames",
            "8",
            "--rounds",
            "1",
            "--width",
            "320",
            "--height",
            "240",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    for key in ("bare_fps", "node_fps", "ratio", "p50_ms", "p99_ms"):
        assert doc[key] > 0, key
    assert [p["batch"] for p in doc["sweep"]] == [1, 2]
    assert doc["ratio"] == pytest.approx(doc["node_fps"] / doc["bare_fps"], rel=0.01)
    assert "cores" in doc["machine"]
