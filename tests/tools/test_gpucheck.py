"""`make gpu-check` on a host without a GPU, and the parts of it a CPU can run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from strata.tools.gpucheck import junit_counts, probe, targets

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_gpu_it_says_so_writes_the_report_and_exits_2(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has a GPU")
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "strata.tools.gpucheck", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no NVIDIA GPU" in proc.stderr and "nothing run" in proc.stderr
    report = json.loads(out.read_text())
    assert report["gpu"] is False and report["reason"].startswith("no NVIDIA GPU")
    assert report["tests"] == {} and report["bench"] == {} and report["ok"] is False


def test_make_gpu_check_is_the_same_command() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "gpu-check:\n\t$(PY) -m strata.tools.gpucheck --out build/gpu-check.json" in makefile


def test_probe_on_this_host_lists_no_usable_backend_without_a_gpu() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has a GPU")
    p = probe()
    assert p.gpus == [] and p.usable == []


def _point(streams: int, batch: int, node: float, ratio: float) -> dict[str, float]:
    return {"streams": streams, "batch": batch, "node_fps": node, "ratio": ratio}


def test_targets_need_85_percent_and_more_streams_faster_at_batch_8() -> None:
    good = {
        "sweep": [
            _point(1, 8, 1000, 0.80),
            _point(2, 8, 1500, 0.90),
            _point(4, 8, 1800, 0.88),
            _point(1, 1, 300, 0.95),
        ]
    }
    t = targets(good)
    assert t["met"] and t["node_vs_bare_by_batch"] == {"1": 0.95, "8": 0.9}
    slow = {"sweep": [_point(1, 8, 1000, 0.9), _point(2, 8, 900, 0.9), _point(4, 8, 1200, 0.9)]}
    t = targets(slow)
    assert not t["met"] and not t["2_streams_faster_than_1_at_b8"]
    assert t["4_streams_faster_than_1_at_b8"]
    assert not targets({"sweep": [_point(1, 8, 10, 0.5)]})["node_at_least_85pct"]
    assert targets({"error": "benchmark timed out"}) == {
        "met": False,
        "why": "benchmark timed out",
    }


def test_junit_counts_from_a_real_pytest_run(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "def test_skip(): pytest.skip('no torch')\n"
    )
    xml = tmp_path / "j.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
         str(tmp_path / "test_x.py")],
        cwd=tmp_path, capture_output=True, timeout=120,
    )  # fmt: skip
    c = junit_counts(xml)
    assert (c["passed"], c["failed"], c["skipped"]) == (1, 1, 1)
    assert c["failures"][0].endswith("::test_bad") and "no torch" in c["skips"][0]
    assert junit_counts(tmp_path / "missing.xml")["passed"] == 0
