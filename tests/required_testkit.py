"""What a test needs from the machine: skip locally, fail in CI.

CI installs every tool the tests use (.ci/system-deps), so there a missing one is a broken
run, never a quiet skip: a green CI must not hide that the RTSP, Prometheus or PostgreSQL
tests did not run. Only GPU, TensorRT, NVML and torch tests may skip in CI (they have their
own guards: gpu_testkit.py, the `gpu_unavailable` fixture, importorskip of torch).
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

_FALSE = {"", "0", "false", "no", "off"}


def in_ci() -> bool:
    """True when the CI variable is set to something true (CI=true, CI=1)."""
    return os.environ.get("CI", "").strip().lower() not in _FALSE


def missing(reason: str, module_level: bool = False) -> NoReturn:
    """Skip with `reason` locally; fail with it in CI."""
    if in_ci():
        pytest.fail(f"CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


def require_tool(name: str, why: str) -> str:
    """The path of the system tool `name`; else skip (fail in CI) with `why` (how to get it)."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} not found: {why}")
    return path


def require_module(name: str, why: str) -> ModuleType:
    """The Python module `name`; else skip (fail in CI) saying `why`, as importorskip."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"cannot import {name} ({exc}): {why}", module_level=True)
