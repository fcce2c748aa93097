"""`strata bench cloud` runs end to end and writes the keys the bench suite reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_writes_the_sweep(colour_classifier: Path, tmp_path: Path) -> None:
    out = tmp_path / "cloud.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "strata.tools.cli",
            "bench",
            "cloud",
            "--model-path",
            str(colour_classifier),
            "--concurrency",
            "1,4",
            "--rounds",
            "1",
            "--seconds",
            "1.0",
            "--warmup",
            "0.2",
            "--bare-seconds",
            "0.3",
            "--max-requests",
            "400",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    for key in ("bare_ips", "served_ips", "ratio", "p50_ms", "p99_ms"):
        assert doc[key] > 0, key
    assert [p["concurrency"] for p in doc["sweep"]] == [1, 4]
    assert all(p["requests"] > 0 and p["errors"] == 0 for p in doc["sweep"])
    assert doc["sweep"][0]["mean_batch"] == 1.0
    assert doc["machine"]["cores"] >= 1
