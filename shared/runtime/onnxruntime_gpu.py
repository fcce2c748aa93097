"""ONNX Runtime on the GPU: the CUDA provider with I/O binding, and the TensorRT provider.

One session per stream, each told to compute on that stream (`user_compute_stream`), with
its input and output bound to the slot's device buffers, so ORT neither allocates nor
copies per run. Runs skip ORT's end-of-run synchronization; the slot's event (recorded
after the device->host copy on the same stream) is what the host waits on.

The model's own input (name, fixed batch, size) is read from the ONNX file first: a fixed
batch caps max_batch, and the TensorRT provider's profile shapes use the real input name
and size. `fp16` runs an FP16 copy of an FP32 model on the CUDA provider (TensorRT builds
FP16 itself), so the option is never silently ignored.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .cuda import Cuda
from .cuda_staged import CudaStagedRunner, Slot
from .fp16 import fp16_copy, is_fp16
from .onnxruntime_cpu import _spec
from .ort_dists import ort_conflict
from .staging import Profile, plan_buffers
from .trt_engine import ModelInput, default_engine_cache, model_input

log = logging.getLogger(__name__)


def capped_max_batch(inp: ModelInput, max_batch: int) -> int:
    """The max batch a model can take: its fixed batch when it has one."""
    fixed = inp.fixed_batch
    if fixed is not None and fixed != max_batch:
        log.warning(
            "model input %r has a fixed batch of %d: max batch %d -> %d",
            inp.name, fixed, max_batch, fixed,
        )  # fmt: skip
        return fixed
    return max_batch


def trt_provider_options(
    inp: ModelInput,
    profile: Profile,
    input_size: int,
    device_id: int,
    stream: int,
    fp16: bool,
    cache: str,
    workspace_mib: int,
) -> dict[str, str]:
    """TensorrtExecutionProvider options; profile shapes only for a dynamic input, from the
    model's own input name and (C, H, W), `input_size` filling only dynamic spatial axes."""
    opts = {
        "device_id": str(device_id),
        "user_compute_stream": str(stream),
        "trt_fp16_enable": "True" if fp16 else "False",
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": cache or str(default_engine_cache()),
        "trt_timing_cache_enable": "True",
        "trt_max_workspace_size": str(workspace_mib << 20),
    }
    if all(d is not None for d in inp.dims):
        return opts  # a static input needs (and takes) no profile
    chw = inp.chw(input_size)
    if inp.fixed_batch is not None:
        profile = profile.for_model_batch(inp.fixed_batch)
    mn, op, mx = ("x".join(str(d) for d in s) for s in profile.shapes(chw))
    opts["trt_profile_min_shapes"] = f"{inp.name}:{mn}"
    opts["trt_profile_opt_shapes"] = f"{inp.name}:{op}"
    opts["trt_profile_max_shapes"] = f"{inp.name}:{mx}"
    return opts


class OrtCudaRunner(CudaStagedRunner):
    """ONNX Runtime CUDAExecutionProvider with I/O binding on N streams."""

    backend = "onnxruntime-cuda"

    def __init__(
        self,
        path: str | Path,
        device_id: int = 0,
        streams: int = 2,
        max_batch: int = 8,
        input_size: int = 640,
        fp16: bool = False,
        allocate: bool = True,
        **options: Any,
    ) -> None:
        """`allocate=False`: sessions (and the streams they compute on) only; the buffers
        wait for `allocate()`."""
        import onnxruntime as ort

        clash = ort_conflict()
        if clash:
            raise ModelLoadError(clash)
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        inp = model_input(path)
        max_batch = capped_max_batch(inp, max_batch)
        self.precision = "fp16" if fp16 or is_fp16(path) else "fp32"
        run_path = self._model_file(path, fp16, str(options.get("engine_cache", "")))
        cuda = Cuda.for_device(device_id)
        self._ort = ort
        stream_handles = [cuda.stream() for _ in range(streams)]
        self._sessions = []
        opts = {**options, "max_batch": max_batch, "input_size": input_size, "fp16": fp16}
        for st in stream_handles:
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            try:
                sess = ort.InferenceSession(
                    str(run_path),
                    so,
                    providers=self._providers(inp, device_id, int(st), opts),
                )
            except Exception as exc:  # ORT raises its own untyped errors
                raise ModelLoadError(f"cannot load {path} on {self.backend}: {exc}") from exc
            if sess.get_providers()[0] != self._main_provider():
                raise ModelLoadError(
                    f"{self._main_provider()} is not available (got {sess.get_providers()}); "
                    "install onnxruntime-gpu matching this CUDA, and no other onnxruntime"
                )
            self._sessions.append(sess)
        s0 = self._sessions[0]
        ins = tuple(_spec(i) for i in s0.get_inputs())
        outs = tuple(_spec(o) for o in s0.get_outputs())
        chw = inp.chw(input_size)
        # Output sizes: one dry run tells the dynamic axes.
        dummy = np.zeros((inp.fixed_batch or 1, *chw), ins[0].dtype)
        probe = s0.run([o.name for o in outs], {ins[0].name: dummy})
        out_shapes = [(max_batch, *p.shape[1:]) for p in probe]
        plan = plan_buffers(
            ins, outs, max_batch, streams, input_shape=(max_batch, *chw), output_shapes=out_shapes
        )
        # The slots use the streams the sessions compute on, not new ones.
        super().__init__(cuda, plan, allocate=False, streams=stream_handles)
        self._chw = chw
        self._fixed = inp.fixed_batch
        self._bindings = [sess.io_binding() for sess in self._sessions]
        self._bound_n = [0] * streams
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self.inputs = tuple(TensorSpec(t.name, (None, *chw), t.dtype) for t in ins)
        log.info("%s: %s, %s, max batch %d", self.backend, path.name, self.precision, max_batch)
        if allocate:
            self.allocate()

    def _model_file(self, path: Path, fp16: bool, cache: str) -> Path:
        """The CUDA provider runs the file's precision: an FP16 copy when asked for FP16."""
        if not fp16 or is_fp16(path):
            return path
        return fp16_copy(path, Path(cache) if cache else default_engine_cache())

    def _main_provider(self) -> str:
        return "CUDAExecutionProvider"

    def _providers(
        self, inp: ModelInput, device_id: int, stream: int, options: dict[str, Any]
    ) -> list[Any]:
        return [
            (
                "CUDAExecutionProvider",
                {"device_id": str(device_id), "user_compute_stream": str(stream)},
            )
        ]

    def _bind(self, slot: int, s: Slot, n: int) -> None:
        io = self._bindings[slot]
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        tin = self.plan.inputs[0]
        dev = self.cuda.device_id
        rows = self._fixed or n  # a fixed-batch model always runs its full batch
        io.bind_input(tin.name, "cuda", dev, tin.dtype.type, [rows, *tin.shape[1:]], s.dev_in)
        for t, ptr in zip(self.plan.outputs, s.dev_out, strict=True):
            io.bind_output(t.name, "cuda", dev, t.dtype.type, [rows, *t.shape[1:]], ptr)
        self._bound_n[slot] = n

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        if self._bound_n[slot] != n:  # rebinding only when the batch size changes
            self._bind(slot, s, n)
        self._sessions[slot].run_with_iobinding(self._bindings[slot], self._run_options)

    def _bind_buffers(self) -> None:
        self._bound_n = [0] * len(self._sessions)  # bound at the first batch of each size

    def _close_backend(self) -> None:
        # Bindings reference the sessions; both go before the streams they compute on.
        self._bindings = []
        self._sessions = []


class OrtTensorrtRunner(OrtCudaRunner):
    """ONNX Runtime TensorrtExecutionProvider (CUDA provider as fallback) with engine cache."""

    backend = "onnxruntime-tensorrt"

    def _model_file(self, path: Path, fp16: bool, cache: str) -> Path:
        return path  # TensorRT makes its own FP16 engine (trt_fp16_enable)

    def _main_provider(self) -> str:
        return "TensorrtExecutionProvider"

    def _providers(
        self, inp: ModelInput, device_id: int, stream: int, options: dict[str, Any]
    ) -> list[Any]:
        max_batch = int(options.get("max_batch", 8))
        min_batch = min(int(options.get("min_batch", 1)), max_batch)
        profile = Profile(
            min_batch, min(max(int(options.get("opt_batch", 4)), min_batch), max_batch), max_batch
        )
        trt = trt_provider_options(
            inp,
            profile,
            int(options.get("input_size", 640)),
            device_id,
            stream,
            bool(options.get("fp16", True)),
            str(options.get("engine_cache", "")),
            int(options.get("workspace_mib", 1024)),
        )
        cuda = {"device_id": str(device_id), "user_compute_stream": str(stream)}
        return [("TensorrtExecutionProvider", trt), ("CUDAExecutionProvider", cuda)]
