"""The limits in force: the policy's batch limit capped by GPU pressure, and GPU
pressure's credit scale and device level, as the credits read them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from strata.edge.flow.credits import CreditGate
from strata.edge.inference.scheduler import RulePolicy
from strata.edge.overload.gpu_pressure import GpuPressure, GpuPressureMetrics
from strata.edge.overload.limits import OverloadLimits
from strata.shared.config.edge import FlowConfig, GpuPressureConfig


def test_gpu_pressure_caps_the_batch_and_scales_the_credits() -> None:
    gpu = GpuPressure(GpuPressureConfig(enabled=True), GpuPressureMetrics(CollectorRegistry()))
    limits = OverloadLimits(RulePolicy(8, 1, 0.2, 8, 0.0), gpu)
    gate = CreditGate(FlowConfig(initial_credits=16), 0.2, 8, 64, limits=limits)
    assert limits.batch_limit() == 8 and gate.credits("cam") == 16
    gpu.level = 3
    assert limits.batch_limit() == 4  # level 2+: divided by batch_divisor
    assert limits.credit_scale == 0.5 and gate.credits("cam") == 8
    assert gate.level("cam") == 1  # devices asked for level 1 at least
