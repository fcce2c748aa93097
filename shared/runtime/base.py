"""One interface over every inference back end (ONNX Runtime, TensorRT, PyTorch CUDA)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Name, shape (None for a dynamic axis) and numpy dtype of a model input or output."""

    name: str
    shape: tuple[int | None, ...]
    dtype: np.dtype[np.generic]


class ModelLoadError(RuntimeError):
    """A model file is missing, unreadable, or disagrees with what the caller expects."""


@runtime_checkable
class ModelRunner(Protocol):
    """Runs a batch (N, C, H, W) through a model and returns its outputs in model order."""

    backend: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Run one batch synchronously; outputs are host arrays the caller may keep."""
        ...

    def close(self) -> None:
        """Release sessions, engines and device memory."""
        ...
