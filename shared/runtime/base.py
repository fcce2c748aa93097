"""One interface over every inference back end (ONNX Runtime, TensorRT, PyTorch CUDA, OpenVINO)."""

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


@dataclass(frozen=True, slots=True)
class OpenVinoOptions:
    """How the openvino back end compiles a model (edge.runtime.openvino_*, docs/config.md).

    `precision` is OpenVINO's inference precision hint: f32 by default, since OpenVINO's own
    default on a CPU with bf16 is bf16. `cache_dir` holds compiled models ("": none);
    `threads` and `streams` 0 leave them to OpenVINO's throughput hint. `batch` N > 0 fixes
    an ONNX model's batch dimension at N before compiling (a static shape runs faster than a
    dynamic one); 0 keeps the model's own.
    """

    device: str = "CPU"
    precision: str = "f32"
    cache_dir: str = ""
    threads: int = 0
    streams: int = 0
    batch: int = 0


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
