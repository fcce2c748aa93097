"""Native TensorRT 10: build (or load a cached) engine from ONNX, run with enqueueV3.

The engine is built with one optimization profile (min/opt/max batch from config, or the
model's fixed batch) and FP16 where asked. A prebuilt or cached engine is run with the
profile it carries: a configured maximum batch above the engine's is lowered to it (and
logged), never left to produce unresolved shapes. Each stream gets its own execution
context; every shape change is checked; tensors are bound by name and the work is queued
with execute_async_v3 on the slot's stream.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .cuda import Cuda
from .cuda_staged import CudaStagedRunner, Slot
from .staging import Profile, engine_profile, plan_buffers
from .trt_engine import build_engine, engine_cache_path, model_input, store_engine

log = logging.getLogger(__name__)


class ShapeError(RuntimeError):
    """TensorRT refused an input shape (outside the engine's optimization profile)."""


def set_shape(ctx: Any, name: str, shape: tuple[int, ...], profile: Profile) -> None:
    """`set_input_shape`, checked: TensorRT returns False instead of raising."""
    if not ctx.set_input_shape(name, shape):
        raise ShapeError(
            f"TensorRT rejected input shape {shape} for {name!r} (engine profile {profile})"
        )


class TensorRTRunner(CudaStagedRunner):
    """TensorRT 10 engine behind the staged interface."""

    backend = "tensorrt"

    def __init__(
        self,
        path: str | Path,
        device_id: int = 0,
        streams: int = 2,
        fp16: bool = True,
        min_batch: int = 1,
        opt_batch: int = 4,
        max_batch: int = 8,
        input_size: int = 640,
        engine_cache: str = "",
        workspace_mib: int = 1024,
        allocate: bool = True,
        **_ignored: Any,
    ) -> None:
        """`allocate=False`: engine and contexts only; the buffers wait for `allocate()`."""
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise ModelLoadError("the tensorrt back end needs TensorRT 10 (pip tensorrt)") from exc
        if int(trt.__version__.split(".")[0]) != 10:
            raise ModelLoadError(f"TensorRT {trt.__version__} found; this runner needs 10.x")
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        cuda = Cuda.for_device(device_id)
        self._trt = trt
        self._logger = trt.Logger(trt.Logger.WARNING)
        if path.suffix == ".engine":
            # A prebuilt engine from the model repository (`strata models engine`), whose
            # manifest records the GPU and TensorRT version it was built for.
            log.info("loading prebuilt TensorRT engine %s", path)
            cached, blob = path, path.read_bytes()
        else:
            inp = model_input(path)
            chw = inp.chw(input_size)
            wanted = Profile(min_batch, min(opt_batch, max_batch), max_batch)
            build_profile = wanted.for_model_batch(inp.fixed_batch)
            if build_profile != wanted:
                log.warning(
                    "%s has a fixed batch of %s: building with profile %s, not %s",
                    path.name, inp.fixed_batch, build_profile, wanted,
                )  # fmt: skip
            cached = engine_cache_path(
                path, engine_cache, build_profile, chw, fp16, trt.__version__, _gpu_name(cuda)
            )
            if cached.is_file():
                log.info("loading TensorRT engine %s", cached)
                blob = cached.read_bytes()
            else:
                blob = build_engine(path, build_profile, chw, fp16, workspace_mib)
                if store_engine(cached, blob):
                    log.info("built TensorRT engine %s", cached)
        self._runtime = trt.Runtime(self._logger)
        self.engine = self._runtime.deserialize_cuda_engine(blob)
        if self.engine is None:
            raise ModelLoadError(f"TensorRT could not deserialize {cached}")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_in = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._in_names = [n for n in names if is_in[n]]
        self._out_names = [n for n in names if not is_in[n]]
        if len(self._in_names) != 1:
            raise ModelLoadError(f"expected one input tensor, the engine has {self._in_names}")
        in_name = self._in_names[0]
        # The engine's own profile decides what batches can run.
        lo, op, hi = (tuple(s) for s in self.engine.get_tensor_profile_shape(in_name, 0))
        profile = engine_profile(lo, op, hi, max_batch)
        if profile.max_batch < max_batch:
            log.warning(
                "engine %s takes batches %d..%d: max batch lowered from %d to %d",
                cached.name, int(lo[0]), int(hi[0]), max_batch, profile.max_batch,
            )  # fmt: skip
        max_batch = profile.max_batch
        chw = tuple(int(d) for d in hi[1:])
        self._contexts = [self.engine.create_execution_context() for _ in range(streams)]
        # Output shapes at the maximum batch, read from a context with that input shape.
        probe = self._contexts[0]
        set_shape(probe, in_name, (max_batch, *chw), profile)
        out_shapes = [tuple(int(d) for d in probe.get_tensor_shape(n)) for n in self._out_names]
        for n, s in zip(self._out_names, out_shapes, strict=True):
            if any(d < 0 for d in s):
                raise ModelLoadError(f"output {n!r} has unresolved shape {s} at batch {max_batch}")

        def spec(name: str, shape: tuple[int, ...]) -> TensorSpec:
            dt = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            return TensorSpec(name, (None, *shape[1:]), dt)

        plan = plan_buffers(
            [spec(in_name, (max_batch, *chw))],
            [spec(n, s) for n, s in zip(self._out_names, out_shapes, strict=True)],
            max_batch,
            streams,
            input_shape=(max_batch, *chw),
            output_shapes=out_shapes,
        )
        super().__init__(cuda, plan, allocate=False)
        self._chw = chw
        self.profile = profile
        self._shape_of: list[int] = [0] * streams
        if allocate:
            self.allocate()

    def _bind_buffers(self) -> None:
        in_name = self._in_names[0]
        for ctx, slot in zip(self._contexts, self._slots, strict=True):
            ctx.set_tensor_address(in_name, slot.dev_in)
            for name, dev in zip(self._out_names, slot.dev_out, strict=True):
                ctx.set_tensor_address(name, dev)

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        ctx = self._contexts[slot]
        if self._shape_of[slot] != n:  # shape changes are cheap but not free: only on change
            rows = max(n, self.profile.min_batch)
            set_shape(ctx, self._in_names[0], (rows, *self._chw), self.profile)
            self._shape_of[slot] = n
        if not ctx.execute_async_v3(int(s.stream)):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def _close_backend(self) -> None:
        # Contexts before the engine, the engine before the runtime (TensorRT's order).
        self._contexts = []
        del self.engine
        del self._runtime


def _gpu_name(cuda: Cuda) -> str:
    try:
        return cuda.device_name()
    except Exception:  # a name is only part of the cache key
        return f"cuda{cuda.device_id}"
