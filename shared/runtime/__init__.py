"""Model runtime: `create_runner(path, backend)` picks a back end, importing only that one.

Back ends register here by name with a lazy import path, so the default install and the
CPU path never load torch, tensorrt or CUDA libraries.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .base import ModelLoadError, ModelRunner, OpenVinoOptions, TensorSpec

# name -> "module:Class"; modules are imported only when that back end is chosen.
BACKENDS: dict[str, str] = {
    "onnxruntime-cpu": "strata.shared.runtime.onnxruntime_cpu:OnnxRuntimeRunner",
    # GPU back ends: staged (pinned buffers, N CUDA streams); see runtime/staging.py.
    "onnxruntime-cuda": "strata.shared.runtime.onnxruntime_gpu:OrtCudaRunner",
    "onnxruntime-tensorrt": "strata.shared.runtime.onnxruntime_gpu:OrtTensorrtRunner",
    "tensorrt": "strata.shared.runtime.tensorrt_runner:TensorRTRunner",
    "torch-cuda": "strata.shared.runtime.torch_cuda:TorchCudaRunner",
    # CPU (and Intel GPU / NPU) through OpenVINO: compiled once, cached, throughput mode.
    "openvino": "strata.shared.runtime.openvino_runner:OpenVinoRunner",
}

# The install extra that brings each back end's packages (the error names it).
EXTRAS: dict[str, str] = {
    "onnxruntime-cpu": "cpu",
    "onnxruntime-cuda": "gpu",
    "onnxruntime-tensorrt": "gpu",
    "tensorrt": "gpu",
    "torch-cuda": "gpu-torch",
    "openvino": "openvino",
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
    extra = EXTRAS[backend]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelLoadError(
            f"back end {backend!r} needs a package that is not installed ({exc.name}); "
            f"install the {extra} extra: pip install 'strata[{extra}]'"
        ) from exc
    runner: ModelRunner = getattr(module, cls_name)(path, **options)
    return runner


__all__ = [
    "BACKENDS",
    "EXTRAS",
    "ModelLoadError",
    "ModelRunner",
    "OpenVinoOptions",
    "TensorSpec",
    "create_runner",
]
