"""Bad sources: one clear error line per camera, the other cameras unaffected."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.camera import CameraState
from strata.device.metrics import CameraCounts
from strata.device.sink import FrameSink
from strata.shared.config.device import CameraConfig

from .conftest import fast_config


def test_bad_sources_fail_alone_with_one_clear_line(
    tmp_path: Path, synthetic_mp4: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    truncated = tmp_path / "truncated.mp4"
    data = synthetic_mp4.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 20)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    cams = {
        "missing": str(tmp_path / "missing.mp4"),
        "unreachable": f"rtsp://127.0.0.1:{closed}/x",
        "truncated": str(truncated),
        "text": str(text),
        "good": str(synthetic_mp4),
    }
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(edge, None, cameras=[CameraConfig(id=k, source=v) for k, v in cams.items()])
    caplog.set_level(logging.DEBUG, logger="strata.device")
    with FrameSink(edge) as sink:
        agent = Agent(cfg, registry=CollectorRegistry())
        agent.start()
        deadline = time.monotonic() + 20
        by_id = {c.camera_id: c for c in agent.cameras}
        while time.monotonic() < deadline and not all(
            by_id[k].done for k in ("missing", "truncated", "text", "good")
        ):
            time.sleep(0.05)
        time.sleep(1.0)  # let the unreachable camera retry a few times
        status = {s.camera_id: s for s in agent.statuses()}
        errors = CameraCounts.read(agent.metrics.registry, "unreachable").source_errors
        agent.stop(drain_timeout_s=5.0)
        after_stop = {s.camera_id: s.state for s in agent.statuses()}
        good = CameraCounts.read(agent.metrics.registry, "good")
        received = sink.received()

    assert status["good"].state == CameraState.ENDED and good.decoded == 60
    assert good.acked == good.decoded - good.dropped_motion == len(received)
    for cam in ("missing", "truncated", "text"):
        assert status[cam].state == CameraState.FAILED, status[cam]
    assert status["unreachable"].state == CameraState.RECONNECTING
    assert after_stop["unreachable"] == CameraState.STOPPED
    assert errors >= 2, "the unreachable camera keeps retrying"

    lines = {
        cam: [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR and r.getMessage().startswith(f"camera {cam}:")
        ]
        for cam in cams
    }
    assert lines["good"] == []
    for cam in ("missing", "unreachable", "truncated", "text"):
        assert len(lines[cam]) == 1, (cam, lines[cam])
    assert "no such file" in lines["missing"][0]
    assert "Connection refused" in lines["unreachable"][0]
    assert "not a readable video" in lines["truncated"][0]
    assert "not a readable video" in lines["text"][0]
