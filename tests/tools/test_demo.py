"""`strata demo` end to end: the real daemons as separate processes over loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def demo(out: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "strata.tools.cli", "demo", "--out", str(out), *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the demo stops its daemons on SIGTERM
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"the demo did not finish in {timeout}s:\n{out}")
    return out


def frames_in(path: Path) -> int:
    import av

    with av.open(str(path)) as f:
        return sum(1 for _ in f.decode(video=0))


def test_demo_runs_the_three_tiers_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    text = finish(demo(out, "--synthetic", "--frames", "30"), 240)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"] is None, text
    assert not summary["interrupted"]
    f = summary["frames"]
    assert f["decoded"] == 30, text
    assert f["dropped_motion"] + f["dropped_gate"] + f["sent_to_edge"] <= 30
    assert f["sent_to_edge"] > 0
    # Every frame the edge finished reached the demo over the PUB socket: the detected
    # ones and those the device dropped, answered from the edge's tracker.
    assert f["results_received"] == f["detected"] + f["results_predicted"]
    assert f["detected"] > 0
    lat = summary["latency"]["capture_to_edge"]
    assert lat["n"] == f["results_received"] and 0 < lat["p50_ms"] <= lat["p99_ms"]
    assert summary["bytes"]["to_edge"] > 0 and summary["bytes"]["source"] > 0
    for tier in ("device", "edge", "cloud"):
        assert summary["processes"][tier]["exit_code"] in (0, 130), text
        assert summary["metrics"][tier], f"no metrics scraped from {tier}"
    video = out / "annotated-cam0-synthetic.mp4"
    assert frames_in(video) == 30
    assert "frames decoded" in text and "p50" in text
    # The event store stays, with the line that reads it.
    store = (out / "events.sqlite").resolve()
    assert store.is_file() and summary["outputs"]["events"] == str(store)
    assert f"strata cloud query --db {store}" in text
    # The starter detector is a COCO one (issue 38): no warning that it knows only vtest.
    assert not [n for n in summary["notes"] if "distilled for vtest" in n]
    assert "distilled for vtest" not in text
    # Progress names each camera's state.
    assert "cam0-synthetic running" in text or "cam0-synthetic ended" in text, text


def test_a_dying_tier_is_reported_and_fails_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # A detector file that does not exist: the edge exits at start-up with a clear error.
    proc = demo(
        out, "--synthetic", "--frames", "20", "--set", "edge.model.path=/nonexistent/model.onnx"
    )
    text = finish(proc, 120)
    assert proc.returncode == 1, text
    assert "edge exited with status" in text
    assert "nonexistent" in text  # the edge's own last log lines are shown
    summary = json.loads((out / "summary.json").read_text())
    assert "edge" in summary["error"]


def test_ctrl_c_stops_everything_and_still_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = demo(out, "--synthetic", "--frames", "400")
    deadline = time.monotonic() + 120
    log = out / "run" / "device.log"
    # Wait until the device agent runs, then press Ctrl-C.
    while time.monotonic() < deadline and not (log.exists() and log.stat().st_size > 0):
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    text = finish(proc, 120)
    assert proc.returncode == 130, text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"]
    assert summary["frames"]["decoded"] < 400
    for tier in ("device", "edge", "cloud"):
        assert summary["processes"][tier]["exit_code"] is not None
    assert (out / "annotated-cam0-synthetic.mp4").exists()


def test_two_file_sources_are_two_cameras(tmp_path: Path) -> None:
    from strata.shared.synthetic import SyntheticClip

    a = SyntheticClip(width=320, height=240, frames=20, seed=4).write(tmp_path / "a.mp4")
    b = SyntheticClip(width=320, height=240, frames=25, seed=5).write(tmp_path / "b.mp4")
    out = tmp_path / "out"
    # Every frame decoded, so the counts below are the files' lengths: a strided calibration
    # burst (the default) holds the frames between its own back undecoded.
    dense = ("--set", "device.cascade.burst_stride=1")
    text = finish(demo(out, "--source", str(a), "--source", str(b), *dense), 240)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"] is None, text
    assert [s["camera"] for s in summary["sources"]] == ["cam0-a", "cam1-b"]
    assert summary["frames"]["decoded"] == 45
    # A file is queued whole at the edge (no shedding): every kept frame is detected.
    assert summary["frames"]["detected"] == summary["frames"]["sent_to_edge"] > 0, text
    assert "edge.overload" not in summary["drops"]
    cams = summary["per_camera"]
    assert cams["cam0-a"]["decoded"] == 20 and cams["cam1-b"]["decoded"] == 25
    # A result for every frame: detected ones for frames sent, predicted for the others.
    predicted = cams["cam0-a"].get("results_predicted", 0)
    assert cams["cam0-a"]["results_received"] == cams["cam0-a"]["sent_to_edge"] + predicted
    assert frames_in(out / "annotated-cam0-a.mp4") == 20
    assert frames_in(out / "annotated-cam1-b.mp4") == 25
    queueing = [n for n in summary["notes"] if "--realtime paces the file" in n]
    assert queueing and "cam0-a, cam1-b" in queueing[0], summary["notes"]


def test_realtime_paces_a_file_like_a_camera(tmp_path: Path) -> None:
    from strata.shared.synthetic import SyntheticClip

    # 20 frames at 10 fps: at least 2 s of decoding, where unpaced it takes a fraction.
    clip = SyntheticClip(width=320, height=240, frames=20, fps=10, seed=4).write(tmp_path / "a.mp4")
    out = tmp_path / "out"
    text = finish(demo(out, "--source", str(clip), "--realtime"), 240)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"] is None, text
    assert summary["frames"]["decoded"] == 20
    assert not [n for n in summary["notes"] if "--realtime paces" in n]
    cfg = (out / "run" / "strata.yaml").read_text()
    assert "realtime: true" in cfg
