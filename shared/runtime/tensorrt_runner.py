"""Native TensorRT 10: build (or load a cached) engine from ONNX, run with enqueueV3.

The engine is built with one optimization profile (min/opt/max batch from config) and
FP16 where the GPU has fast FP16. TensorRT 10 networks are always explicit-batch (the
EXPLICIT_BATCH flag is ignored, so none is passed) and STRICT_TYPES is gone. Each stream
gets its own execution context; tensors are bound by name with set_tensor_address and
the work is queued with execute_async_v3 on the slot's stream.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .cuda import Cuda
from .cuda_staged import CudaStagedRunner, Slot
from .staging import Profile, plan_buffers

log = logging.getLogger(__name__)


def engine_path(
    onnx_path: Path, cache: str, profile: Profile, fp16: bool, trt_version: str, gpu: str
) -> Path:
    """Where the engine for this model, profile, precision, TensorRT and GPU is cached."""
    digest = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:12]
    gpu_tag = "".join(c if c.isalnum() else "-" for c in gpu)
    name = (
        f"{onnx_path.stem}.{digest}.trt{trt_version}.{gpu_tag}."
        f"b{profile.min}-{profile.opt}-{profile.max}.{'fp16' if fp16 else 'fp32'}.engine"
    )
    return (Path(cache) if cache else onnx_path.parent) / name


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
        **_ignored: Any,
    ) -> None:
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise ModelLoadError("the tensorrt back end needs TensorRT 10 (pip tensorrt)") from exc
        if int(trt.__version__.split(".")[0]) < 10:
            raise ModelLoadError(f"TensorRT {trt.__version__} found; this runner needs 10+")
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        cuda = Cuda(device_id)
        self._trt = trt
        self._logger = trt.Logger(trt.Logger.WARNING)
        profile = Profile(min_batch, opt_batch, max_batch)
        cached = engine_path(path, engine_cache, profile, fp16, trt.__version__, cuda.device_name())
        if path.suffix == ".engine":
            # A prebuilt engine from the model repository (`strata models engine`), whose
            # manifest records the GPU and TensorRT version it was built for.
            log.info("loading prebuilt TensorRT engine %s", path)
            cached = path
            blob = path.read_bytes()
        elif cached.is_file():
            log.info("loading TensorRT engine %s", cached)
            blob = cached.read_bytes()
        else:
            blob = self._build(path, profile, fp16, input_size, workspace_mib)
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(blob)
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
        self._contexts = [self.engine.create_execution_context() for _ in range(streams)]
        # Output shapes at the maximum batch, read from a context with that input shape.
        in_name = self._in_names[0]
        in_shape = tuple(self.engine.get_tensor_shape(in_name))
        chw = tuple(d if d > 0 else input_size for d in in_shape[1:])
        probe = self._contexts[0]
        probe.set_input_shape(in_name, (max_batch, *chw))
        out_shapes = [tuple(probe.get_tensor_shape(n)) for n in self._out_names]

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
        super().__init__(cuda, plan)
        self._chw = chw
        self._profile = profile
        for ctx, s in zip(self._contexts, self._slots, strict=True):
            ctx.set_tensor_address(in_name, s.dev_in)
            for name, dev in zip(self._out_names, s.dev_out, strict=True):
                ctx.set_tensor_address(name, dev)
        self._shape_of: list[int] = [0] * streams

    def _build(
        self, path: Path, profile: Profile, fp16: bool, input_size: int, workspace_mib: int
    ) -> bytes:
        trt = self._trt
        builder = trt.Builder(self._logger)
        network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(path.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise ModelLoadError(f"TensorRT cannot parse {path}: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
        # platform_has_fast_fp16 is deprecated in TensorRT 10 (every supported GPU has it).
        if fp16 and getattr(builder, "platform_has_fast_fp16", True):
            config.set_flag(trt.BuilderFlag.FP16)
        inp = network.get_input(0)
        chw = tuple(d if d > 0 else input_size for d in tuple(inp.shape)[1:])
        opt = builder.create_optimization_profile()
        mn, op, mx = profile.shapes(chw)
        opt.set_shape(inp.name, mn, op, mx)
        config.add_optimization_profile(opt)
        log.info("building TensorRT engine for %s (profile %s, fp16=%s)", path, profile, fp16)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise ModelLoadError(f"TensorRT failed to build an engine for {path}")
        return bytes(blob)

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        ctx = self._contexts[slot]
        if self._shape_of[slot] != n:  # shape changes are cheap but not free: only on change
            ctx.set_input_shape(self._in_names[0], (n, *self._chw))
            self._shape_of[slot] = n
        if not ctx.execute_async_v3(int(s.stream)):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def _close_backend(self) -> None:
        self._contexts = []
        del self.engine
