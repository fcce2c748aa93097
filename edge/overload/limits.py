"""The limits in force, as the credits and the batcher read them: the batch policy's
batch limit capped by GPU pressure, and GPU pressure's credit scale and device level
(strata.edge.flow.credits.CreditLimits)."""

from __future__ import annotations

from strata.edge.inference.scheduler import BatchPolicy
from strata.edge.overload.gpu_pressure import GpuPressure


class OverloadLimits:
    """Reads the batch policy and GPU pressure at each call (both change at run time)."""

    def __init__(self, policy: BatchPolicy, gpu: GpuPressure) -> None:
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
