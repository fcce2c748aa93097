"""`strata device` as a user runs it: a real process, a real ZeroMQ receiver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from strata.device.sink import FrameSink


def _strata(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_documents_every_option() -> None:
    out = _strata("device", "--help").stdout
    for flag in ("--source", "--camera-id", "--edge", "--config", "--no-gate", "synthetic://"):
        assert flag in out


def test_runs_cameras_to_the_end_and_reports(port: int, tmp_path: Path) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text("device:\n  motion:\n    threshold: 3.0\n  sender:\n    window: 8\n")
    with FrameSink(edge) as sink:
        res = _strata(
            "device",
            "--config",
            str(cfg),
            "--source",
            "synthetic://?frames=30&seed=4&width=160&height=120",
            "--source",
            str(tmp_path / "absent.mp4"),
            "--camera-id",
            "lobby",
            "--edge",
            edge,
            "--no-gate",
        )
        got = sink.received()
    assert res.returncode == 1, res.stderr  # one camera failed
    assert "camera absent: no such file" in res.stderr
    assert "camera lobby: ended; decoded 30" in res.stderr
    assert got and {r.camera_id for r in got} == {"lobby"}


def test_bad_config_key_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "strata.yaml"
    cfg.write_text("device:\n  motion:\n    treshold: 3.0\n")
    res = _strata("device", "--config", str(cfg), "--source", "x.mp4")
    assert res.returncode == 2
    assert "device.motion.treshold: unknown key" in res.stderr


def test_bad_edge_endpoint_is_a_clear_error() -> None:
    res = _strata("device", "--source", "synthetic://?frames=5", "--edge", "nonsense", "--no-gate")
    assert res.returncode == 2
    assert "cannot use edge endpoint 'nonsense'" in res.stderr
