"""The degradation controller: its triggers and hysteresis on a clock the test moves, then
the real controller in a real node, driven by telemetry injected at the NVML boundary."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from prometheus_client import CollectorRegistry
from strata.edge.build import NodeOptions, build_node
from strata.edge.overload.gpu_pressure import GpuPressure, GpuPressureMetrics
from strata.shared.config.edge import EdgeConfig, GpuPressureConfig
from strata.shared.gpu_telemetry import GpuSample
from strata.shared.loopback import free_port
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)
GIB = 1 << 30


def gpu(temp: float = 60.0, used_gib: float = 10.0, total_gib: float = 100.0) -> GpuSample:
    return GpuSample(
        0, "GPU-test", "Injected", temperature_c=temp,
        memory_used_bytes=int(used_gib * GIB), memory_total_bytes=int(total_gib * GIB),
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def controller(**over: Any) -> tuple[GpuPressure, Clock, CollectorRegistry]:
    clock = Clock()
    reg = CollectorRegistry()
    cfg = GpuPressureConfig.model_validate(
        {"step_s": 5, "clear_for_s": 30, "interval_s": 1, **over}
    )
    return GpuPressure(cfg, GpuPressureMetrics(reg), clock), clock, reg


def run(c: GpuPressure, clock: Clock, s: GpuSample, seconds: float) -> int:
    """Tick once a second for `seconds` on sample `s`; returns the level."""
    for _ in range(int(seconds)):
        clock.t += 1
        c.tick([s])
    return c.level


def test_temperature_must_stay_above_85_for_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    c, clock, reg = controller()
    assert run(c, clock, gpu(temp=90), 59) == 0  # hot, but not for a minute yet
    assert run(c, clock, gpu(temp=70), 1) == 0  # a dip restarts the minute
    assert run(c, clock, gpu(temp=90), 59) == 0
    with caplog.at_level(logging.WARNING):
        assert run(c, clock, gpu(temp=90), 2) == 1
    assert "degradation up: level 0 (normal) -> 1 (no_cloud_crops)" in caplog.text
    assert "gpu_temperature" in caplog.text
    labels = {"direction": "up", "level": "1", "reason": "gpu_temperature"}
    assert sample(reg, "strata_edge_degradation_transitions_total", labels) == 1
    assert sample(reg, "strata_edge_degradation_level") == 1
    assert not c.crops_enabled and c.batch_cap(8) == 8


def test_levels_climb_cheapest_first_and_come_down_with_hysteresis() -> None:
    c, clock, reg = controller(low_priority_cameras=["lobby"])
    assert run(c, clock, gpu(used_gib=95), 1) == 1  # memory above 90 %: at once
    assert run(c, clock, gpu(used_gib=95), 4) == 1  # one step per step_s (5 s)
    assert run(c, clock, gpu(used_gib=95), 1) == 2
    assert c.batch_cap(8) == 4 and c.credit_scale == 1.0
    assert run(c, clock, gpu(used_gib=95), 5) == 3
    assert c.credit_scale == 0.5 and c.device_level == 1 and not c.from_cache("lobby")
    assert run(c, clock, gpu(used_gib=95), 5) == 4
    assert c.from_cache("lobby") and not c.from_cache("door")
    assert run(c, clock, gpu(used_gib=95), 60) == 4  # max level
    # 87 % is under the trigger but above the clear threshold (85 %): the trigger holds.
    assert run(c, clock, gpu(used_gib=87), 120) == 4
    # Clear: the first clear sample starts the 30 s; then one step down per clear period.
    assert run(c, clock, gpu(used_gib=50), 30) == 4
    assert run(c, clock, gpu(used_gib=50), 1) == 3
    assert run(c, clock, gpu(used_gib=50), 29) == 3
    assert run(c, clock, gpu(used_gib=50), 1) == 2
    assert run(c, clock, gpu(used_gib=50), 90) == 0
    assert c.crops_enabled and c.batch_cap(8) == 8 and c.credit_scale == 1.0
    down = {"direction": "down", "level": "0", "reason": "clear"}
    assert sample(reg, "strata_edge_degradation_transitions_total", down) == 1
    up4 = {"direction": "up", "level": "4", "reason": "gpu_memory"}
    assert sample(reg, "strata_edge_degradation_transitions_total", up4) == 1


def test_inference_p99_above_twice_the_sla_triggers() -> None:
    c, clock, reg = controller(inference_sla_ms=50, p99_min_samples=20)
    for _ in range(19):
        c.observe_inference(0.5)
    assert run(c, clock, gpu(), 1) == 0  # too few batches to judge
    c.observe_inference(0.5)
    assert run(c, clock, gpu(), 1) == 1
    assert sample(reg, "strata_edge_degradation_trigger", {"trigger": "inference_p99"}) == 1
    assert sample(reg, "strata_edge_inference_p99_seconds") == pytest.approx(0.5)
    for _ in range(200):
        c.observe_inference(0.02)
    run(c, clock, gpu(), 1)
    assert sample(reg, "strata_edge_degradation_trigger", {"trigger": "inference_p99"}) == 0


def test_no_gpu_samples_never_trigger_and_disabled_does_nothing() -> None:
    c, clock, _ = controller()
    for _ in range(100):
        clock.t += 1
        c.tick([])
    assert c.level == 0
    off, clock, _ = controller(enabled=False)
    assert not off.due()
    assert run(off, clock, gpu(temp=99, used_gib=99), 200) == 0


def test_auto_runs_the_controller_only_for_a_gpu_runner(colour_model: Path) -> None:
    cfg = GpuPressureConfig()
    assert cfg.enabled == "auto"
    for on_gpu in (True, False):
        metrics = GpuPressureMetrics(CollectorRegistry())
        assert GpuPressure(cfg, metrics, on_gpu=on_gpu).enabled is on_gpu
    # A CPU node: its batch times are no GPU SLA's business (a slow CPU stuck at level 4).
    node = build_node(
        EdgeConfig.model_validate({"model": {"input_size": MODEL_SIZE}}), colour_model
    )
    try:
        assert not node.gpu_pressure.enabled and not node.gpu_pressure.due()
    finally:
        node.stop()


class InjectedGpu:
    """The NVML boundary: what the node's telemetry reads, set by the test (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current = gpu()

    def set(self, s: GpuSample) -> None:
        with self._lock:
            self.current = s

    def sample(self) -> list[GpuSample]:
        with self._lock:
            return [self.current]


def _wait(cond: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_a_real_node_degrades_on_injected_telemetry_and_recovers(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    cfg = EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            # A cloud nobody listens on: the uplink exists, so the crop branch is live.
            "cloud": f"127.0.0.1:{free_port()}",
            "model": {"input_size": MODEL_SIZE},
            "batching": {
                "max_batch": 4,
                "max_queue_delay_ms": 30,
                "queue_per_camera": 64,
                "delay_target_ms": 60_000,
            },
            # Credits for the raw agent's bursts, even halved at level 3 (no BUSY here).
            "flow": {"initial_credits": 64},
            "crops": {"score_max": 1.0},
            "overload": {
                "gpu_pressure": {
                    "enabled": True,  # a CPU runner: auto would leave the controller off
                    "interval_s": 0.05,
                    "gpu_temp_for_s": 0.3,
                    "step_s": 0.2,
                    "clear_for_s": 0.4,
                    "low_priority_cameras": ["lobby"],
                }
            },
        }
    )
    injected = InjectedGpu()
    node = build_node(cfg, colour_model, "colour", NodeOptions(telemetry=injected))
    node.start()
    reg = node.metrics.registry
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        seq = 1000
        # Level 0: the lobby camera gets real detections.
        for i in range(2):
            seq += 1
            agent.send_image("lobby", seq, synthetic_clip.frame(20 + i).image)
        first = sub.collect(2)
        first_acks = agent.acks(4, timeout_s=10)
        assert len(first) == 2 and not any(m.predicted for m in first)
        assert sample(reg, "DCGM_FI_DEV_GPU_TEMP", _dcgm_labels()) == 60.0

        injected.set(gpu(temp=95))
        assert _wait(lambda: sample(reg, "strata_edge_degradation_level") == 4)
        up = "strata_edge_degradation_transitions_total"
        for level in ("1", "2", "3", "4"):
            labels = {"direction": "up", "level": level, "reason": "gpu_temperature"}
            assert sample(reg, up, labels) == 1
        assert node.gpu_pressure.credit_scale == 0.5

        # Level 4: a burst of 8 from the door camera runs in batches of at most 2; the
        # lobby is answered from its last result, flagged, without inference.
        le2 = sample(reg, "strata_edge_batch_size_bucket", {"le": "2.0"})
        count = sample(reg, "strata_edge_batch_size_count")
        crops_skipped = sample(
            reg, "strata_edge_degradation_actions_total", {"action": "cloud_crops"}
        )
        normal = [a.credits for a in first_acks if a.credits]
        agent.acks(10_000, timeout_s=0.5)  # drain the acks of level 0
        for i in range(8):
            seq += 1
            agent.send_image("door", seq, synthetic_clip.frame(22 + i).image)
        seq += 1
        agent.send_image("lobby", seq, synthetic_clip.frame(30).image)
        got = sub.collect(9)
        assert len(got) == 9
        # Level 3+: the acks ask every device for fewer frames (degrade_level at least 1).
        acks = agent.acks(18, timeout_s=10)
        assert len(acks) >= 9 and all(a.degrade_level >= 1 for a in acks)
        # ... and grant them half their credit (degradation.credit_scale).
        granted = [a.credits for a in acks if a.credits]
        assert normal and granted and max(granted) <= math.ceil(max(normal) * 0.5)
        lobby = [m for m in got if m.camera_id == "lobby"]
        door = [m for m in got if m.camera_id == "door"]
        assert len(lobby) == 1 and lobby[0].predicted and lobby[0].note == "degraded"
        assert list(lobby[0].detections) == list(first[-1].detections)
        assert not any(m.predicted for m in door)
        new_batches = sample(reg, "strata_edge_batch_size_count") - count
        assert new_batches >= 4
        assert sample(reg, "strata_edge_batch_size_bucket", {"le": "2.0"}) - le2 == new_batches
        cached = {"action": "cached_result"}
        assert sample(reg, "strata_edge_degradation_actions_total", cached) == 1
        assert (
            sample(reg, "strata_edge_degradation_actions_total", {"action": "cloud_crops"})
            > crops_skipped
        )

        # Cooling: the level comes back down to 0, one counted step at a time.
        injected.set(gpu(temp=60))
        assert _wait(lambda: sample(reg, "strata_edge_degradation_level") == 0)
        for level in ("3", "2", "1", "0"):
            labels = {"direction": "down", "level": level, "reason": "clear"}
            assert sample(reg, up, labels) == 1
        agent.acks(10_000, timeout_s=0.5)
        seq += 1
        agent.send_image("lobby", seq, synthetic_clip.frame(31).image)
        again = sub.collect(1)
        assert len(again) == 1 and not again[0].predicted
        after = agent.acks(2, timeout_s=10)
        assert after and all(a.degrade_level == 0 for a in after)
        assert node.error is None
    finally:
        node.stop()


def _dcgm_labels() -> dict[str, str]:
    import socket

    return {
        "gpu": "0",
        "UUID": "GPU-test",
        "device": "nvidia0",
        "modelName": "Injected",
        "Hostname": socket.gethostname(),
    }


def test_the_credit_scale_cuts_a_credit_held_at_the_per_camera_cap() -> None:
    from strata.edge.flow.credits import CreditGate
    from strata.edge.inference.scheduler import RulePolicy
    from strata.edge.overload.limits import OverloadLimits
    from strata.shared.config.edge import FlowConfig

    c, _clock, _ = controller(max_level=4)
    limits = OverloadLimits(RulePolicy(4, 1, 0.2, 8, 0.0), c)
    gate = CreditGate(FlowConfig(initial_credits=64, min_credits=1), 0.2, 4, 8, limits=limits)
    assert gate.credits("cam") == 8  # 64 offered, capped at 8 per camera
    c.level = 3
    assert gate.credits("cam") == 4 and gate.level("cam") == 1
    c.level = 0
    assert gate.credits("cam") == 8 and gate.level("cam") == 0
