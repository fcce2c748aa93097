"""ONNX Runtime on the GPU: the CUDA provider with I/O binding, and the TensorRT provider.

One session per stream, each told to compute on that stream (`user_compute_stream`), with
its input and output bound to the slot's device buffers, so ORT neither allocates nor
copies per run. Runs skip ORT's end-of-run synchronization; the slot's event (recorded
after the device->host copy on the same stream) is what the host waits on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .cuda import Cuda
from .cuda_staged import CudaStagedRunner, Slot
from .onnxruntime_cpu import _spec
from .staging import Profile, plan_buffers

log = logging.getLogger(__name__)


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
        **options: Any,
    ) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        cuda = Cuda(device_id)
        self._ort = ort
        stream_handles = [cuda.stream() for _ in range(streams)]
        self._sessions = []
        for st in stream_handles:
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            try:
                sess = ort.InferenceSession(
                    str(path),
                    so,
                    providers=self._providers(
                        device_id,
                        int(st),
                        {**options, "max_batch": max_batch, "input_size": input_size},
                    ),
                )
            except Exception as exc:  # ORT raises its own untyped errors
                raise ModelLoadError(f"cannot load {path} on {self.backend}: {exc}") from exc
            if sess.get_providers()[0] != self._main_provider():
                raise ModelLoadError(
                    f"{self._main_provider()} is not available (got {sess.get_providers()}); "
                    "install onnxruntime-gpu matching this CUDA"
                )
            self._sessions.append(sess)
        s0 = self._sessions[0]
        ins = tuple(_spec(i) for i in s0.get_inputs())
        outs = tuple(_spec(o) for o in s0.get_outputs())
        chw = tuple(d if d is not None else input_size for d in ins[0].shape[1:])
        # Output sizes: one dry run at batch 1 on the CPU-visible path tells the dynamic axes.
        dummy = np.zeros((1, *chw), ins[0].dtype)
        probe = s0.run([o.name for o in outs], {ins[0].name: dummy})
        out_shapes = [(max_batch, *p.shape[1:]) for p in probe]
        plan = plan_buffers(
            ins, outs, max_batch, streams, input_shape=(max_batch, *chw), output_shapes=out_shapes
        )
        super().__init__(cuda, plan)
        # Use the streams the sessions compute on, not new ones.
        for s, st in zip(self._slots, stream_handles, strict=True):
            cuda.destroy_stream(s.stream)
            s.stream = st
        self._chw = chw
        self._bindings = [sess.io_binding() for sess in self._sessions]
        self._bound_n = [0] * streams
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self.inputs = tuple(TensorSpec(t.name, (None, *chw), t.dtype) for t in ins)

    def _main_provider(self) -> str:
        return "CUDAExecutionProvider"

    def _providers(self, device_id: int, stream: int, options: dict[str, Any]) -> list[Any]:
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
        io.bind_input(tin.name, "cuda", dev, tin.dtype.type, [n, *tin.shape[1:]], s.dev_in)
        for t, ptr in zip(self.plan.outputs, s.dev_out, strict=True):
            io.bind_output(t.name, "cuda", dev, t.dtype.type, [n, *t.shape[1:]], ptr)
        self._bound_n[slot] = n

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        if self._bound_n[slot] != n:  # rebinding only when the batch size changes
            self._bind(slot, s, n)
        self._sessions[slot].run_with_iobinding(self._bindings[slot], self._run_options)

    def _close_backend(self) -> None:
        self._bindings = []
        self._sessions = []


class OrtTensorrtRunner(OrtCudaRunner):
    """ONNX Runtime TensorrtExecutionProvider (CUDA provider as fallback) with engine cache."""

    backend = "onnxruntime-tensorrt"

    def _main_provider(self) -> str:
        return "TensorrtExecutionProvider"

    def _providers(self, device_id: int, stream: int, options: dict[str, Any]) -> list[Any]:
        profile = Profile(
            int(options.get("min_batch", 1)),
            int(options.get("opt_batch", 4)),
            int(options.get("max_batch", 8)),
        )
        size = int(options.get("input_size", 640))
        name = str(options.get("input_name", "images"))
        mn, op, mx = ("x".join(str(d) for d in s) for s in profile.shapes((3, size, size)))
        cache = str(options.get("engine_cache", "")) or "trt_cache"
        trt = {
            "device_id": str(device_id),
            "user_compute_stream": str(stream),
            "trt_fp16_enable": "True" if options.get("fp16", True) else "False",
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": cache,
            "trt_timing_cache_enable": "True",
            "trt_max_workspace_size": str(int(options.get("workspace_mib", 1024)) << 20),
            "trt_profile_min_shapes": f"{name}:{mn}",
            "trt_profile_opt_shapes": f"{name}:{op}",
            "trt_profile_max_shapes": f"{name}:{mx}",
        }
        cuda = {"device_id": str(device_id), "user_compute_stream": str(stream)}
        return [("TensorrtExecutionProvider", trt), ("CUDAExecutionProvider", cuda)]
