"""What the gpu tests share: whether this run asked for them, and which back ends."""

from __future__ import annotations

import os

import pytest


def gpu_requested(config: pytest.Config) -> bool:
    """Whether this run asked for the gpu tests (`-m gpu`, not `-m "not gpu"`)."""
    expr = str(config.getoption("markexpr") or "")
    return "gpu" in expr and "not gpu" not in expr


def gpu_backends_wanted() -> set[str] | None:
    """STRATA_GPU_BACKENDS (comma list): the back ends this host must run; None: all."""
    raw = os.environ.get("STRATA_GPU_BACKENDS", "").strip()
    return {b.strip() for b in raw.split(",") if b.strip()} or None
