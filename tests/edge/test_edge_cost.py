"""`strata cost` (tools) against a real edge node's /metrics endpoint while frames flow."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from edge_colour_model import build_colour_detector
from edge_testkit import RawAgent
from strata.edge.build import build_node
from strata.shared.config.edge import EdgeConfig
from strata.shared.loopback import free_port
from strata.shared.metrics import serve_metrics
from strata.shared.synthetic import SyntheticClip
from strata.tools.cli import main

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_cost_per_camera_from_a_running_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_colour_detector(tmp_path / "colour.onnx", 128)
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": 128},
            "batching": {"max_batch": 2, "queue_per_camera": 64},
        }
    )
    node = build_node(cfg, model, "colour")
    node.start()
    port = serve_metrics(node.metrics.registry, "127.0.0.1", free_port())
    assert port
    ctx = zmq.Context()
    stop = threading.Event()
    clip = SyntheticClip(width=160, height=120, frames=20, objects=2, seed=2)

    def send() -> None:
        agents = {c: RawAgent(ctx, node.endpoints.listen, f"agent-{c}") for c in ("a", "b")}
        seq = 0
        while not stop.is_set():
            seq += 1
            for cam, agent in agents.items():
                agent.send_image(f"cam-{cam}", seq, clip.frame(seq % 20).image)
                agent.acks(1, timeout_s=1.0)
            time.sleep(0.02 if cam == "a" else 0.05)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        time.sleep(0.5)
        cfg_file = tmp_path / "strata.yaml"
        cfg_file.write_text("cost:\n  gpu_per_hour: 36.0\n  currency: EUR\n")
        rc = main(
            ["cost", "--edge", f"127.0.0.1:{port}", "--interval", "1.5", "--json",
             "--config", str(cfg_file)]
        )  # fmt: skip
    finally:
        stop.set()
        sender.join(10)
        node.stop()
        ctx.destroy(linger=0)
    assert rc == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert doc["currency"] == "EUR" and doc["prices"]["gpu_per_hour"] == 36.0
    cams = {r["camera"]: r for r in doc["cameras"]}
    assert {"cam-a", "cam-b"} <= set(cams)
    for r in cams.values():
        assert r["frames_per_day"] > 0 and r["gpu_seconds_per_day"] > 0
        gpu_cost = r["gpu_seconds_per_day"] / 3600 * 36.0
        assert r["cost_per_day"]["gpu"] == pytest.approx(gpu_cost, rel=1e-3, abs=1e-3)
    assert doc["total_per_day"] == pytest.approx(
        sum(r["cost_per_day"]["total"] for r in cams.values()), abs=1e-3
    )


def test_cost_without_endpoints_or_with_a_dead_one_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["cost"]) == 2
    assert "at least one --edge or --cloud" in capsys.readouterr().err
    assert main(["cost", "--cloud", f"127.0.0.1:{free_port()}", "--interval", "0.1"]) == 1
    assert "cannot scrape http://127.0.0.1:" in capsys.readouterr().err
