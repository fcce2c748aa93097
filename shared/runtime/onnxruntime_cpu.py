"""ONNX Runtime on the CPU: the default back end, and the fallback everywhere."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec

log = logging.getLogger(__name__)

_ORT_TYPES: dict[str, np.dtype[np.generic]] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(int32)": np.dtype(np.int32),
}


def _spec(arg: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else None for d in arg.shape)
    dtype: np.dtype[np.generic] = _ORT_TYPES.get(arg.type, np.dtype(np.float32))
    return TensorSpec(str(arg.name), shape, dtype)


class OnnxRuntimeRunner:
    """An ONNX Runtime session with the given execution providers (CPU unless told)."""

    backend = "onnxruntime-cpu"

    def __init__(
        self,
        path: str | Path,
        threads: int = 0,
        providers: list[str | tuple[str, dict[str, str]]] | None = None,
        spin: bool = True,
        dynamic_block_base: int = 0,
    ) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads > 0:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        if not spin:
            # Idle pool threads sleep instead of spinning: a server that waits between
            # requests gives those cycles to its network and decode threads.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if dynamic_block_base > 0:
            # Parallel loops hand out shrinking blocks instead of one fixed share per
            # thread, so a pool thread preempted by other work stalls the op less (no
            # gain measured on the 2-core cloud bench: docs/benchmarks.md).
            opts.add_session_config_entry("session.dynamic_block_base", str(dynamic_block_base))
        try:
            self.session = ort.InferenceSession(
                str(path), opts, providers=providers or ["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises its own untyped errors
            raise ModelLoadError(f"cannot load model {path}: {exc}") from exc
        self.inputs = tuple(_spec(i) for i in self.session.get_inputs())
        self.outputs = tuple(_spec(o) for o in self.session.get_outputs())
        self._input_name = self.inputs[0].name
        self._output_names = [o.name for o in self.outputs]
        log.info("loaded %s with %s", path.name, self.session.get_providers())

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        out = self.session.run(self._output_names, {self._input_name: batch})
        return [np.asarray(o) for o in out]

    def close(self) -> None:
        del self.session
