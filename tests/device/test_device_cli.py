"""`strata device` as a user runs it: a real process, a real ZeroMQ receiver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from strata.device.transport.sink import FrameSink


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


def test_cameras_over_two_processes_report_as_one_agent(port: int, tmp_path: Path) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text("device:\n  processes: 2\n  motion:\n    threshold: 3.0\n")
    metrics = tmp_path / "final.prom"
    srcs = [f"synthetic://?frames=30&seed={i}&width=160&height=120" for i in range(3)]
    with FrameSink(edge) as sink:
        res = _strata(
            "device",
            "--config",
            str(cfg),
            *[a for s in srcs for a in ("--source", s)],
            "--edge",
            edge,
            "--no-gate",
            "--metrics-file",
            str(metrics),
        )
        got = sink.received()
    assert res.returncode == 0, res.stderr
    assert "2 worker process(es): 0: synthetic-0, synthetic-2; 1: synthetic-1" in res.stderr
    for i in range(3):
        assert f"camera synthetic-{i}: ended; decoded 30" in res.stderr
    assert {r.camera_id for r in got} == {"synthetic-0", "synthetic-1", "synthetic-2"}
    text = metrics.read_text()
    assert 'strata_device_frames_decoded_total{camera="synthetic-1"} 30.0' in text
    assert 'worker="1"' in text


def test_a_worker_that_cannot_start_ends_the_agent_with_status_2(tmp_path: Path) -> None:
    res = _strata(
        "device",
        "--source",
        "synthetic://?frames=5",
        "--source",
        "synthetic://?frames=5&seed=2",
        "--gate-model",
        str(tmp_path / "absent.onnx"),
        "--config",
        str(_write(tmp_path / "s.yaml", "device:\n  processes: 2\n")),
    )
    assert res.returncode == 2
    assert "absent.onnx" in res.stderr


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_workers_end_when_the_agent_is_killed(port: int, tmp_path: Path) -> None:
    """kill -9 of the supervisor leaves no worker running on its own (each sees its pipe
    close, settles its frames and ends)."""
    import os
    import signal
    import time

    edge = f"tcp://127.0.0.1:{port}"
    cfg = _write(tmp_path / "s.yaml", "device:\n  processes: 2\n")
    srcs = [
        f"synthetic://?frames=2000&seed={i}&width=96&height=72&fps=20&realtime=1" for i in (1, 2)
    ]
    with FrameSink(edge) as sink:
        cmd = [sys.executable, "-m", "strata.tools.cli", "device", "--config", str(cfg)]
        cmd += ["--edge", edge, "--no-gate", *[a for s in srcs for a in ("--source", s)]]
        proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        try:
            assert sink.wait_for(20, timeout=60)
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            workers = [int(c) for c in children]
            assert len(workers) >= 2
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            deadline = time.monotonic() + 30
            while any(_running(w) for w in workers) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not any(_running(w) for w in workers)
        finally:
            proc.kill()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_rules_for_a_camera_the_agent_does_not_run_are_said_at_start(
    port: int, tmp_path: Path
) -> None:
    """Cameras from --source: the rules may be the site's (other agents' cameras), so the
    agent runs, but says which rules' cameras it lacks and guesses the misspelt one."""
    edge = f"tcp://127.0.0.1:{port}"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        "rules:\n  cameras:\n    lobyy:\n      lines:\n"
        "        - name: door\n          points: [[0.5, 0], [0.5, 1]]\n"
        "    garage:\n      zones:\n"
        "        - name: bay\n          points: [[0, 0], [1, 0], [1, 1]]\n"
    )
    with FrameSink(edge) as sink:
        res = _strata(
            "device",
            "--config",
            str(cfg),
            "--source",
            "synthetic://?frames=5&seed=4&width=160&height=120",
            "--camera-id",
            "lobby",
            "--edge",
            edge,
            "--no-gate",
        )
        sink.received()
    assert res.returncode == 0, res.stderr
    assert "rules.cameras.lobyy: no camera of this agent has that id (its cameras: lobby)" in (
        res.stderr
    )
    assert "did you mean 'lobby'?" in res.stderr
    garage = next(ln for ln in res.stderr.splitlines() if "rules.cameras.garage" in ln)
    assert "did you mean" not in garage
