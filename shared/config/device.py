"""Config of the device tier (`strata device`)."""

from __future__ import annotations

from pydantic import Field

from .base import StrictModel
from .common import MetricsConfig


class DeviceConfig(StrictModel):
    """Options of `strata device`."""

    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )
