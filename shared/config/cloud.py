"""Config of the cloud tier (`strata cloud`)."""

from __future__ import annotations

from pydantic import Field

from .base import StrictModel
from .common import MetricsConfig


class CloudConfig(StrictModel):
    """Options of `strata cloud`."""

    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )
