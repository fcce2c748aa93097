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


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata.tools.cli", "bench", "edge", *args],
        capture_output=True,
        text=True,
        timeout=170,
    )


def test_the_load_keeps_within_the_nodes_credits(colour_detector: Path, tmp_path: Path) -> None:
    """Offered more than the node grants, the load's cameras are answered BUSY only for what
    they sent before the first grant, as an agent's: a BUSY frame waits for room in its
    camera's credit, it does not bounce back and forth (each bounce costs the node)."""
    out = tmp_path / "edge.json"
    inflight = 32
    proc = _bench(
        "--model", str(colour_detector), "--batch", "2", "--frames", "48", "--rounds", "2",
        "--width", "320", "--height", "240", "--inflight", str(inflight), "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    busy = json.loads(out.read_text())["sweep"][0]["rounds"]["busy_rounds"]
    assert sum(busy) <= inflight, busy


def test_bench_on_openvino_measures_node_bare_and_start_up(
    colour_detector: Path, tmp_path: Path
) -> None:
    """Both sides on OpenVINO; the start-up's warm open comes from the cache the cold wrote."""
    pytest.importorskip("openvino")
    out = tmp_path / "edge.json"
    proc = _bench(
        "--backend", "openvino", "--model", str(colour_detector), "--batch", "2",
        "--frames", "8", "--rounds", "1", "--width", "320", "--height", "240",
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "openvino" and doc["gpu"] == ""
    for key in ("bare_fps", "node_fps", "ratio"):
        assert doc[key] > 0, key
    start = doc["startup"]
    assert start["cold_s"] > 0 and start["warm_s"] > 0
    assert start["warm_from_cache"] is True


def _fp32_only(tmp_path: Path) -> Path:
    """A repository holding the starter PicoDet-S 416 without its INT8 variant."""
    import shutil

    from strata.shared.models import ModelRepository, starter_repository
    from strata.shared.models.manifest import save_manifest

    folder = tmp_path / "repo" / "picodet_s_416"
    folder.mkdir(parents=True)
    shutil.copy(starter_repository() / "picodet_s_416" / "model.onnx", folder)
    m = ModelRepository(starter_repository()).manifest("picodet_s_416")
    save_manifest(m.model_copy(update={"variants": {}}), folder)
    return folder.parent


def test_bench_int8_without_the_variant_says_how_to_make_it(tmp_path: Path) -> None:
    repo = _fp32_only(tmp_path)
    proc = _bench(
        "--precision", "int8", "--backend", "openvino", "--model", "picodet_s_416",
        "--repository", str(repo),
    )  # fmt: skip
    assert proc.returncode != 0
    assert "strata models quantize picodet_s_416" in proc.stderr, proc.stderr


def test_int8_takes_the_back_ends_variant(tmp_path: Path) -> None:
    """openvino: the starter's int8-openvino (an IR); ONNX Runtime has no INT8 variant of
    it, and the refusal says how to make one."""
    import argparse

    from strata.tools.bench.edge import _model

    def args(backend: str, repository: str = "") -> argparse.Namespace:
        return argparse.Namespace(
            model="picodet_s_416", precision="int8", backend=backend, repository=repository
        )

    assert _model(args("openvino")).name == "model.int8-openvino.xml"
    with pytest.raises(SystemExit, match="strata models quantize picodet_s_416"):
        _model(args("onnxruntime-cpu"))
    with pytest.raises(SystemExit, match="no variant 'int8'"):
        _model(args("openvino", str(_fp32_only(tmp_path))))
