"""The limits in force, as the credits and the batcher read them: the batch policy's
batch limit capped by GPU pressure, and GPU pressure's credit scale and device level
(strata.edge.flow.credits.CreditLimits)."""

from __future__ import annotations

from typing import Protocol

from strata.edge.overload.gpu_pressure import GpuPressure


class _Decision(Protocol):
    @property
    def max_batch(self) -> int: ...


class CurrentBatch(Protocol):
    """What these limits read of the batch policy (strata.edge.inference.scheduler's
    BatchPolicy, which imports overload's batch limit: named here by shape, so that
    overload stays a leaf of inference)."""

    def current(self) -> _Decision: ...


class OverloadLimits:
    """Reads the batch policy and GPU pressure at each call (both change at run time)."""

    def __init__(self, policy: CurrentBatch, gpu: GpuPressure) -> None:
        self.policy = policy
        self.gpu = gpu

    def batch_limit(self) -> int:
        """The most frames the next batch takes."""
        return self.gpu.batch_cap(self.policy.current().max_batch)

    @property
    def credit_scale(self) -> float:
        return self.gpu.credit_scale

    @property
    def device_level(self) -> int:
        return self.gpu.device_level
