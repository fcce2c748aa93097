"""The one config file: a section per tier, all optional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from .base import StrictModel, load_yaml_model, validate_model
from .cloud import CloudConfig
from .common import CostConfig, LoggingConfig
from .device import DeviceConfig
from .edge import EdgeConfig
from .models import ModelsConfig


class StrataConfig(StrictModel):
    """Root of the YAML config; every section has defaults."""

    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Logging.")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="Model repository.")
    device: DeviceConfig = Field(default_factory=DeviceConfig, description="Device agent.")
    edge: EdgeConfig = Field(default_factory=EdgeConfig, description="Edge node.")
    cloud: CloudConfig = Field(default_factory=CloudConfig, description="Cloud endpoint.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Cost model prices.")


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> StrataConfig:
    """Load and validate a config file (None: defaults), with CLI overrides merged on top."""
    if path is None:
        return validate_model(StrataConfig, overrides or {})
    return load_yaml_model(StrataConfig, path, overrides)
