"""device.clips on the agent: every camera gets a packet ring and a cutter, off by default."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.sink import FrameSink
from strata.shared.config.device import CameraConfig, ClipsConfig
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

from .conftest import fast_config


def _agent(port: int, source: Path, clips: ClipsConfig) -> Agent:
    cfg = fast_config(
        f"tcp://127.0.0.1:{port}",
        None,
        cameras=[CameraConfig(id="cam", source=str(source))],
        clips=clips,
    )
    return Agent(cfg, registry=CollectorRegistry())


def test_clips_on_give_each_camera_a_ring_that_holds_its_packets(port: int, tmp_path: Path) -> None:
    clip = SyntheticClip(width=160, height=120, frames=30, fps=10, seed=2).write(tmp_path / "c.mp4")
    agent = _agent(port, clip, ClipsConfig(enabled=True, dir=str(tmp_path / "clips")))
    with FrameSink(f"tcp://127.0.0.1:{port}"):
        agent.start()
        assert agent.wait(20.0)
        held = sample(agent.metrics.registry, "strata_device_clip_ring_bytes", {"camera": "cam"})
        agent.stop(drain_timeout_s=2.0)
    assert set(agent.clip_cutters) == {"cam"}
    assert held is not None and held > 0


def test_clips_off_by_default_hold_nothing(port: int, tmp_path: Path) -> None:
    clip = SyntheticClip(width=160, height=120, frames=10, fps=10, seed=2).write(tmp_path / "c.mp4")
    agent = _agent(port, clip, ClipsConfig())
    with FrameSink(f"tcp://127.0.0.1:{port}"):
        agent.start()
        assert agent.wait(20.0)
        agent.stop(drain_timeout_s=2.0)
    assert agent.clip_cutters == {}
    assert not agent.cameras[0].ring
