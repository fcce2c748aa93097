"""Configuration: one YAML file validated by strict pydantic models."""

from .base import ConfigError, StrictModel, load_yaml_model, validate_model
from .root import StrataConfig, load_config

__all__ = [
    "ConfigError",
    "StrataConfig",
    "StrictModel",
    "load_config",
    "load_yaml_model",
    "validate_model",
]
