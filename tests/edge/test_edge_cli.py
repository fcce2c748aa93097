"""`strata edge` as a real process: flags, config, serving, clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent
from strata.shared.loopback import free_port
from strata.shared.synthetic import SyntheticClip

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

STRATA = [sys.executable, "-m", "strata.tools.cli"]


def test_edge_process_serves_and_stops_on_sigterm(
    colour_model: Path, tmp_path: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    listen, publish = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    cfg = tmp_path / "strata.yaml"
    cfg.write_text(
        f"edge:\n  publish: {publish}\n  model:\n    path: {colour_model}\n"
        f"    input_size: {MODEL_SIZE}\n  batching:\n    max_queue_delay_ms: 2\n"
    )
    proc = subprocess.Popen(
        [*STRATA, "edge", "--listen", listen, "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        sub = Listener(zctx, publish)
        agent = RawAgent(zctx, listen)
        got: list[Any] = []
        seq = 0
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:  # until the node is up
            seq += 1
            agent.send_image("cam", seq, synthetic_clip.frame(30).image, frame_index=30)
            got = sub.collect(1, timeout_s=1.0)
        assert got, "no detections from the edge process"
        assert {d.label for d in got[0].detections} == {b.label for b in synthetic_clip.boxes(30)}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "signal 15: stopping" in out
    assert "still running" not in out, out  # the worker stalled at stop (its acks had no reader)


def test_edge_bad_model_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    out = subprocess.run(
        [*STRATA, "edge", "--listen", "tcp://127.0.0.1:0", "--model", str(tmp_path / "no.onnx")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "model file not found" in out.stderr


def test_edge_bad_config_key_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("edge:\n  batching:\n    max_batchh: 3\n")
    out = subprocess.run(
        [*STRATA, "edge", "--config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "edge.batching.max_batchh: unknown key" in out.stderr


def test_edge_missing_uplink_ca_or_bad_cloud_list_exits_2(
    colour_model: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"edge:\n  cloud: 127.0.0.1:{free_port()}\n  model:\n    path: {colour_model}\n"
        f"  uplink:\n    spool_path: {tmp_path / 'spool.sqlite'}\n"
        f"    tls:\n      ca_file: {tmp_path / 'no-ca.pem'}\n"
    )
    out = subprocess.run(
        [*STRATA, "edge", "--listen", "tcp://127.0.0.1:0", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "cannot read the uplink's CA file" in out.stderr
    cfg.write_text("edge:\n  cloud: [cloud-a:50051, cloud-b:50051]\n")
    out = subprocess.run(
        [*STRATA, "edge", "--config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "dns:///NAME:PORT" in out.stderr
