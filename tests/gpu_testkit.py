"""What the gpu tests share: whether this run asked for them, which back ends, and how a
test opens one (or skips, failing under `-m gpu`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from strata.shared.runtime import ModelLoadError, create_runner


def gpu_requested(config: pytest.Config) -> bool:
    """Whether this run asked for the gpu tests (`-m gpu`, not `-m "not gpu"`)."""
    expr = str(config.getoption("markexpr") or "")
    return "gpu" in expr and "not gpu" not in expr


def gpu_backends_wanted() -> set[str] | None:
    """STRATA_GPU_BACKENDS (comma list): the back ends this host must run; None: all."""
    raw = os.environ.get("STRATA_GPU_BACKENDS", "").strip()
    return {b.strip() for b in raw.split(",") if b.strip()} or None


GPU_BACKENDS = ("onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt", "torch-cuda")


def cuda_available() -> bool:
    """An NVIDIA driver and a CUDA binding (cuda-python or torch) on this host."""
    return shutil.which("nvidia-smi") is not None and (
        importlib.util.find_spec("cuda") is not None
        or importlib.util.find_spec("torch") is not None
    )


def open_gpu(
    unavailable: Callable[[str], NoReturn], path: Path, backend: str, **options: Any
) -> Any:
    """A GPU runner, or skip -- fail under `-m gpu` -- saying why it cannot load here."""
    require(unavailable, backend)
    try:
        return create_runner(path, backend, **options)
    except ModelLoadError as exc:
        unavailable(f"{backend} cannot load: {exc}")


def require(unavailable: Callable[[str], NoReturn], backend: str) -> None:
    """Skip a back end this host was told not to run; else demand a GPU."""
    wanted = gpu_backends_wanted()
    if wanted is not None and backend not in wanted:
        pytest.skip(f"{backend} not in STRATA_GPU_BACKENDS on this host")
    if not cuda_available():
        unavailable("needs an NVIDIA GPU and CUDA (nvidia-smi, cuda-python or torch)")
