"""The one config file: a section per tier, all optional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from .base import KeyValueError, StrictModel, load_yaml_model, validate_model
from .cloud import CloudConfig
from .common import CostConfig, LoggingConfig
from .device import DeviceConfig
from .edge import EdgeConfig
from .models import ModelsConfig
from .objects import ObjectsConfig
from .rules import RulesConfig


class StrataConfig(StrictModel):
    """Root of the YAML config; every section has defaults."""

    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Logging.")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="Model repository.")
    objects: ObjectsConfig = Field(
        default_factory=ObjectsConfig, description="Labels tracked and their filters."
    )
    device: DeviceConfig = Field(default_factory=DeviceConfig, description="Device agent.")
    edge: EdgeConfig = Field(default_factory=EdgeConfig, description="Edge node.")
    cloud: CloudConfig = Field(default_factory=CloudConfig, description="Cloud endpoint.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Cost model prices.")
    rules: RulesConfig = Field(
        default_factory=RulesConfig,
        description="Rules on tracks per camera: zones, lines, dwell, stationary (docs/events.md).",
    )

    @model_validator(mode="after")
    def _rules_for_known_cameras(self) -> StrataConfig:
        # Top level: the rules and the camera list are different sections.
        try:
            self.rules.check_cameras([c.id or None for c in self.device.cameras])
        except KeyValueError as exc:
            raise KeyValueError(("rules", *exc.path), str(exc)) from None
        return self

    @model_validator(mode="after")
    def _rules_on_tracked_labels(self) -> StrataConfig:
        # A rule on a label the edge drops (objects.track) could never fire.
        try:
            self.rules.check_tracked(self.objects.track)
        except KeyValueError as exc:
            raise KeyValueError(("rules", *exc.path), str(exc)) from None
        return self


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> StrataConfig:
    """Load and validate a config file (None: defaults), with CLI overrides merged on top."""
    if path is None:
        return validate_model(StrataConfig, overrides or {})
    return load_yaml_model(StrataConfig, path, overrides)
