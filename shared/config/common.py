"""Config sections every daemon shares."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import StrictModel


class LoggingConfig(StrictModel):
    """How daemons log (through a queue, so logging never blocks a hot path)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest level written."
    )
    json_lines: bool = Field(False, description="One JSON object per line instead of text.")


class MetricsConfig(StrictModel):
    """Prometheus exposition for one daemon."""

    host: str = Field("127.0.0.1", description="Address the /metrics HTTP server binds to.")
    port: int = Field(0, ge=0, le=65535, description="Port of /metrics; 0 turns it off.")


class CostConfig(StrictModel):
    """Prices of the cost model (`strata cost`, `strata bench`), per camera.

    GPU time is each batch's time split over its frames; egress is what leaves the edge
    site for the cloud; storage is events held for `retention_days`. Decimal GB (10^9 B),
    as clouds bill. The defaults are list prices of the order of a public cloud's."""

    currency: str = Field("USD", description="Currency the prices are in (a label only).")
    gpu_per_hour: float = Field(2.5, ge=0.0, description="Price of one GPU-hour.")
    egress_per_gb: float = Field(0.09, ge=0.0, description="Price of one GB leaving the edge.")
    storage_per_gb_month: float = Field(
        0.023, ge=0.0, description="Price of one GB stored for a month."
    )
    retention_days: float = Field(
        30.0, gt=0.0, description="Days events are kept (storage held at steady state)."
    )
