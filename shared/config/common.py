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
