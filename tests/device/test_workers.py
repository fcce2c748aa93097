"""Cameras over worker processes: real processes, a real ZeroMQ receiver, kill -9 of one."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from strata.device.metrics import CameraCounts
from strata.device.transport.sink import FrameSink
from strata.device.workers import (
    AgentWorkers,
    WorkerError,
    burst_share,
    spread,
    worker_count,
)
from strata.shared.config.device import CameraConfig, DeviceConfig, GateConfig

from .conftest import fast_config


def _cams(n: int, frames: int = 20, **extra: int) -> list[CameraConfig]:
    q = "".join(f"&{k}={v}" for k, v in extra.items())
    return [
        CameraConfig(
            id=f"cam{i}", source=f"synthetic://?frames={frames}&seed={i}&width=96&height=72{q}"
        )
        for i in range(n)
    ]


def test_auto_is_one_process_per_8_cameras_at_most_one_per_core() -> None:
    def auto(cameras: int, cores: int) -> int:
        return worker_count(DeviceConfig(cameras=_cams(cameras)), cores=cores)

    assert (auto(1, 2), auto(15, 2), auto(16, 2), auto(40, 2), auto(40, 4)) == (1, 1, 2, 2, 4)


def test_a_set_count_is_kept_but_never_more_than_the_cameras() -> None:
    cfg = DeviceConfig(cameras=_cams(3), processes=2)
    assert worker_count(cfg, cores=1) == 2
    assert worker_count(cfg.model_copy(update={"processes": 5}), cores=8) == 3


def test_cameras_are_dealt_in_turn() -> None:
    assert spread(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]


def test_every_frame_of_every_camera_arrives_and_metrics_merge(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(edge, None, cameras=_cams(4), processes=2)
    with FrameSink(edge) as sink:
        agent = AgentWorkers(cfg)
        agent.start()
        deadline = time.monotonic() + 60
        while not agent.cameras_done() and time.monotonic() < deadline:
            time.sleep(0.1)
        agent.stop()
        got = Counter(r.camera_id for r in sink.received())
    assert {s.camera_id: s.state.value for s in agent.statuses()} == {
        f"cam{i}": "ended" for i in range(4)
    }
    # Every camera's counters read back through the supervisor's one registry.
    for i in range(4):
        c = CameraCounts.read(agent.registry, f"cam{i}")
        assert c.decoded == c.sent + c.dropped_motion == 20
        assert c.acked == c.sent == got[f"cam{i}"] > 0
    # Samples of no camera (the sender's edge) are told apart by worker.
    workers = {
        s.labels.get("worker")
        for m in agent.registry.collect()
        if m.name == "strata_device_edge_up"
        for s in m.samples
    }
    assert workers == {"0", "1"}


def test_a_worker_killed_is_started_again_with_its_cameras(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cams = _cams(2, frames=400, fps=20, realtime=1)
    cfg = fast_config(edge, None, cameras=cams, processes=2)
    with FrameSink(edge) as sink:
        agent = AgentWorkers(cfg)
        agent.start()
        try:
            assert sink.wait_for(10, timeout=30)
            victim = agent.workers[1]
            os.kill(victim.process.pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while agent.restarts.labels("1")._value.get() < 1 and time.monotonic() < deadline:
                agent.watch()
                time.sleep(0.1)
            assert agent.restarts.labels("1")._value.get() == 1
            # cam1 (worker 1's) sends again from its new process.
            seen = len([r for r in sink.received() if r.camera_id == "cam1"])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                agent.watch()
                if len([r for r in sink.received() if r.camera_id == "cam1"]) > seen + 5:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("cam1 sent nothing after its worker was started again")
        finally:
            agent.stop()
    assert all(s.state.value in ("ended", "stopped") for s in agent.statuses())


def test_reload_keeps_cameras_in_their_worker_and_adds_to_the_emptiest(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cams = _cams(3, frames=400, fps=20, realtime=1)
    cfg = fast_config(edge, None, cameras=cams, processes=2)
    with FrameSink(edge) as sink:
        agent = AgentWorkers(cfg)
        agent.start()
        try:
            assert [list(w.cameras) for w in agent.workers] == [["cam0", "cam2"], ["cam1"]]
            extra = _cams(4, frames=400, fps=20, realtime=1)[3]
            assert agent.reload([*cams, extra]) == (["cam3"], [])
            assert [list(w.cameras) for w in agent.workers] == [["cam0", "cam2"], ["cam1", "cam3"]]
            assert agent.reload([cams[1], cams[2], extra]) == ([], ["cam0"])
            assert [list(w.cameras) for w in agent.workers] == [["cam2"], ["cam1", "cam3"]]
            assert sink.wait_for(1, timeout=30)
            deadline = time.monotonic() + 30
            while not any(r.camera_id == "cam3" for r in sink.received()):
                assert time.monotonic() < deadline, "the added camera sent nothing"
                time.sleep(0.1)
        finally:
            agent.stop()


def test_a_worker_that_cannot_start_is_a_clear_error(port: int, tmp_path: Path) -> None:
    gate = GateConfig(model_path=str(tmp_path / "absent.onnx"))
    cfg = fast_config(f"tcp://127.0.0.1:{port}", None, cameras=_cams(2), processes=2, gate=gate)
    agent = AgentWorkers(cfg)
    with pytest.raises(WorkerError, match=r"absent\.onnx"):
        agent.start()
    assert all(not w.process.is_alive() for w in agent.workers)


def test_the_hosts_burst_slots_are_dealt_out_to_the_workers() -> None:
    # 0 is one a core over the whole host, not in each worker: 2 workers on 2 cores burst
    # 2 cameras at once, not 4.
    assert [burst_share(0, 2, i, cores=2) for i in range(2)] == [1, 1]
    assert [burst_share(5, 2, i) for i in range(2)] == [3, 2]
    assert [burst_share(0, 3, i, cores=8) for i in range(3)] == [3, 3, 2]
    # Fewer slots than workers: each still gets one, or its bursts would never start.
    assert [burst_share(1, 2, i) for i in range(2)] == [1, 1]
    cfg = DeviceConfig.model_validate(
        {"cameras": [c.model_dump() for c in _cams(4)], "cascade": {"concurrent_bursts": 4}}
    )
    sup = AgentWorkers(cfg, workers=2)
    shares = [sup._spec(w).config.cascade.concurrent_bursts for w in sup.workers]
    assert shares == [2, 2] and cfg.cascade.concurrent_bursts == 4  # the config untouched


def test_worker_0_also_takes_back_clips_of_cameras_no_worker_runs() -> None:
    from strata.device.workers import WorkerSpec
    from strata.shared.config.common import LoggingConfig

    def spec(index: int, mine: list[str], others: set[str]) -> WorkerSpec:
        cfg = DeviceConfig(cameras=[CameraConfig(id=c, source="x.mp4") for c in mine])
        return WorkerSpec(index, cfg, "", LoggingConfig(), frozenset(others))

    first, second = spec(0, ["a"], {"b"}), spec(1, ["b"], {"a"})
    assert [first.owns_clips_of(c) for c in ("a", "b", "gone")] == [True, False, True]
    assert [second.owns_clips_of(c) for c in ("a", "b", "gone")] == [False, True, False]
