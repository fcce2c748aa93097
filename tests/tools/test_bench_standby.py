"""The standby bench runs its fresh processes and reports what a standby holds (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.tools.cli import main

pytestmark = pytest.mark.timeout(120)


def test_the_bench_measures_a_standby_against_a_cold_start(tmp_path: Path) -> None:
    out = tmp_path / "standby.json"
    assert main(["bench", "standby", "--rounds", "1", "--batch", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["backend"] == "onnxruntime-cpu" and report["rounds"] == 1
    # The standby holds no batch buffer; the live copy holds its input (2 x 3 x 320 x 320).
    assert report["standby_io_mib"] == 0
    assert report["live_io_mib"] * (1 << 20) >= 2 * 3 * 320 * 320 * 4
    assert report["standby_device_mib"] == 0 == report["live_device_mib"]
    assert report["take_over_s"] > 0 and report["cold_start_s"] > 0
    assert report["live_mib"] > 0
