"""Helpers every subcommand uses: the --config flag and config loading with CLI overrides."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import ConfigError, StrataConfig, load_config
from ..logs import setup_logging


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """Add `--config FILE` and `--log-level`."""
    parser.add_argument("--config", metavar="FILE", help="YAML config file (docs/config.md).")
    parser.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="override logging.level"
    )


def load_or_exit(args: argparse.Namespace, overrides: dict[str, Any], name: str) -> StrataConfig:
    """Load the config with overrides; on error print it and exit 2. Sets up logging."""
    if getattr(args, "log_level", None):
        overrides = {**overrides, "logging": {"level": args.log_level}}
    try:
        cfg = load_config(getattr(args, "config", None), overrides)
    except ConfigError as exc:
        print(f"strata {name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    setup_logging(cfg.logging.level, cfg.logging.json_lines, name=name)
    return cfg


def prune(d: dict[str, Any]) -> dict[str, Any]:
    """Drop None values (flags not given) recursively, so they do not override the file."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            inner = prune(value)
            if inner:
                out[key] = inner
        elif value is not None:
            out[key] = value
    return out
