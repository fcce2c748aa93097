"""Model runtime: `create_runner(path, backend)` picks a back end, importing only that one.

Back ends register here by name with a lazy import path, so the default install and the
CPU path never load torch, tensorrt or CUDA libraries.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .base import ModelLoadError, ModelRunner, TensorSpec

# name -> "module:Class"; modules are imported only when that back end is chosen.
BACKENDS: dict[str, str] = {
    "onnxruntime-cpu": "strata.shared.runtime.onnxruntime_cpu:OnnxRuntimeRunner",
    # GPU back ends: staged (pinned buffers, N CUDA streams); see runtime/staging.py.
    "onnxruntime-cuda": "strata.shared.runtime.onnxruntime_gpu:OrtCudaRunner",
    "onnxruntime-tensorrt": "strata.shared.runtime.onnxruntime_gpu:OrtTensorrtRunner",
    "tensorrt": "strata.shared.runtime.tensorrt_runner:TensorRTRunner",
    "torch-cuda": "strata.shared.runtime.torch_cuda:TorchCudaRunner",
}


def create_runner(
    path: str | Path, backend: str = "onnxruntime-cpu", **options: Any
) -> ModelRunner:
    """Load `path` with the named back end; ModelLoadError says clearly what went wrong."""
    try:
        target = BACKENDS[backend]
    except KeyError:
        raise ModelLoadError(
            f"unknown runtime back end {backend!r}; known: {', '.join(sorted(BACKENDS))}"
        ) from None
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelLoadError(
            f"back end {backend!r} needs a package that is not installed ({exc.name}); "
            "install the gpu extra: pip install 'strata[gpu]'"
        ) from exc
    runner: ModelRunner = getattr(module, cls_name)(path, **options)
    return runner


__all__ = ["BACKENDS", "ModelLoadError", "ModelRunner", "TensorSpec", "create_runner"]
