"""Config of the edge tier (`strata edge`)."""

from __future__ import annotations

from pydantic import Field

from .base import StrictModel
from .common import MetricsConfig


class EdgeConfig(StrictModel):
    """Options of `strata edge`."""

    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="Prometheus endpoint of this daemon."
    )
