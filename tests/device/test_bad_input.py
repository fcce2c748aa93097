"""Bad sources: one clear error line per camera, the other cameras unaffected."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.camera import CameraState
from strata.device.metrics import CameraCounts
from strata.device.transport.sink import FrameSink
from strata.shared.config.device import CameraConfig, SourceConfig
from strata.shared.loopback import free_port

from .conftest import fast_config


def test_bad_sources_fail_alone_with_one_clear_line(
    tmp_path: Path, synthetic_mp4: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    truncated = tmp_path / "truncated.mp4"
    data = synthetic_mp4.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 20)
    closed = free_port()  # a port nobody listens on
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


def test_a_reconnecting_camera_logs_every_retry_and_exports_its_state(
    port: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strata.shared.metrics import sample

    monkeypatch.setattr("strata.device.camera.RETRY_LOG_PERIOD_S", 0.0)
    closed = free_port()  # a port nobody listens on
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(
        edge, None, cameras=[CameraConfig(id="cam", source=f"rtsp://127.0.0.1:{closed}/x")]
    )
    caplog.set_level(logging.INFO, logger="strata.device")
    with FrameSink(edge):
        agent = Agent(cfg, registry=CollectorRegistry())
        agent.start()
        reg = agent.metrics.registry
        deadline = time.monotonic() + 20
        while (
            time.monotonic() < deadline
            and sample(reg, "strata_device_camera_retry_attempt", {"camera": "cam"}) < 3
        ):
            time.sleep(0.05)
        attempt = sample(reg, "strata_device_camera_retry_attempt", {"camera": "cam"})
        retry_at = sample(reg, "strata_device_camera_retry_at_seconds", {"camera": "cam"})
        state = {
            st.value: sample(
                reg, "strata_device_camera_state", {"camera": "cam", "state": st.value}
            )
            for st in CameraState
        }
        refused = sample(
            reg, "strata_device_camera_last_error", {"camera": "cam", "kind": "refused"}
        )
        errors = CameraCounts.read(reg, "cam").source_errors
        agent.stop(drain_timeout_s=5.0)
        stopped = sample(reg, "strata_device_camera_state", {"camera": "cam", "state": "stopped"})
    assert attempt >= 3 and time.time() - 5 < retry_at < time.time() + 5
    assert state["reconnecting"] == 1 and sum(state.values()) == 1
    assert refused == 1 and stopped == 1
    retries = [
        r
        for r in caplog.records
        if r.getMessage().startswith("camera cam:") and "retry" in r.getMessage()
    ]
    assert retries[0].levelno == logging.ERROR and "retry 1 in" in retries[0].getMessage()
    assert all(r.levelno == logging.WARNING for r in retries[1:])
    # Every failure up to the last one read got its line (the period is 0 here).
    assert len(retries) >= errors - 1 >= 2
    assert "Connection refused" in retries[-1].getMessage()


def test_retry_lines_are_rate_limited_and_say_what_they_stand_for(
    port: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("strata.device.camera.RETRY_LOG_PERIOD_S", 0.6)
    closed = free_port()  # a port nobody listens on
    edge = f"tcp://127.0.0.1:{port}"
    src = SourceConfig(open_timeout_s=2.0, backoff_initial_s=0.05, backoff_max_s=0.1)
    cfg = fast_config(
        edge,
        None,
        source=src,
        cameras=[CameraConfig(id="cam", source=f"rtsp://127.0.0.1:{closed}/x")],
    )
    caplog.set_level(logging.INFO, logger="strata.device")
    with FrameSink(edge):
        agent = Agent(cfg, registry=CollectorRegistry())
        agent.start()
        time.sleep(2.0)
        errors = CameraCounts.read(agent.metrics.registry, "cam").source_errors
        agent.stop(drain_timeout_s=5.0)
    lines = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert 2 <= len(lines) < errors, (len(lines), errors)
    assert any("more like it since the last line" in line for line in lines[1:])
