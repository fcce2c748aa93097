"""OpenVINO: ONNX in, compiled once for the device and cached on disk, run in throughput mode.

The model is compiled with OpenVINO's THROUGHPUT hint (several CPU streams, each a share
of the cores) and one asynchronous infer request per stream: the runner offers them as
the staged interface's slots (`shared/runtime/staging.py`), so the edge's worker keeps one
batch in flight per stream and every core works. `run()` is the synchronous ModelRunner
entry point (the bench, the canary, `strata models check`).

The inference precision hint defaults to f32: on a CPU with bf16 (AMD EPYC Zen 4, Intel
Sapphire Rapids) OpenVINO's own default would run bf16 and move the boxes. The compiled
blob goes to `cache_dir` (OpenVINO's model cache, keyed by the model, device and options),
so the second start loads it instead of compiling (`loaded_from_cache` says which).
An ONNX file's hard-swishes are fused before compiling (openvino_graph.py: exact, 1.6x on
PicoDet here). Devices: CPU, GPU (Intel), NPU are accepted; only CPU has been run
(docs/edge.md).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from .base import ModelLoadError, OpenVinoOptions, TensorSpec
from .openvino_graph import fuse_hard_swish
from .pool import Block, host_pool
from .staging import SlotRing, host_slots

log = logging.getLogger(__name__)

DEVICES = ("CPU", "GPU", "NPU")
PRECISIONS = ("f32", "bf16", "f16")

_OV_TYPES: dict[str, np.dtype[np.generic]] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "u8": np.dtype(np.uint8),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
}


def _spec(port: Any) -> TensorSpec:
    shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
    dtype = _OV_TYPES.get(port.get_element_type().get_type_name(), np.dtype(np.float32))
    return TensorSpec(port.get_any_name(), shape, dtype)


class _Done:
    """The SlotRing's event for a slot: its infer request's completion."""

    def __init__(self, request: Any) -> None:
        self.request = request

    def query(self) -> bool:
        return bool(self.request.wait_for(0))

    def synchronize(self) -> None:
        self.request.wait()


class OpenVinoRunner:
    """An OpenVINO compiled model with one infer request per slot (see the module docstring)."""

    backend = "openvino"

    def __init__(
        self,
        path: str | Path,
        options: OpenVinoOptions | None = None,
        max_batch: int = 1,
        input_size: int = 640,
        allocate: bool = True,
    ) -> None:
        opts = options or OpenVinoOptions()
        path = Path(path)
        self.path = path
        self.device = opts.device
        t0 = time.perf_counter()
        self.compiled = compile_model(path, opts)
        self.compile_s = time.perf_counter() - t0
        self.loaded_from_cache = bool(_property(self.compiled, "LOADED_FROM_CACHE", False))
        self.inputs = tuple(_spec(p) for p in self.compiled.inputs)
        self.outputs = tuple(_spec(p) for p in self.compiled.outputs)
        if len(self.inputs) != 1:
            n = len(self.inputs)
            raise ModelLoadError(f"{path}: one image input expected, the model has {n}")
        if opts.batch > 0:
            # Our reshape, not the file's: its batch axis stays what the file (and so its
            # manifest) says; fixed_batch below holds the compiled one.
            first = self.inputs[0]
            self.inputs = (replace(first, shape=(None, *first.shape[1:])),)
        self.slots = max(1, int(_property(self.compiled, "OPTIMAL_NUMBER_OF_INFER_REQUESTS", 1)))
        self.streams = int(_property(self.compiled, "NUM_STREAMS", self.slots))
        self._requests = [self.compiled.create_infer_request() for _ in range(self.slots)]
        self._sync = self.compiled.create_infer_request()
        self._ring = SlotRing(self.slots)
        fixed = opts.batch or self.inputs[0].shape[0]
        self.max_batch = int(fixed) if fixed else max(1, max_batch)
        self.fixed_batch: int | None = int(fixed) if fixed else None
        dims = self.inputs[0].shape
        self._shape = (self.max_batch, *(int(d or input_size) for d in dims[1:]))
        self.pool_owner = f"{self.backend}@{id(self):x}"
        self._blocks: list[Block] = []
        self._host: list[np.ndarray] = []
        log.info(
            "openvino: %s on %s, %s, %d streams, %d infer requests, %s in %.2f s",
            path.name,
            opts.device,
            opts.precision,
            self.streams,
            self.slots,
            "loaded from cache" if self.loaded_from_cache else "compiled",
            self.compile_s,
        )
        if allocate:
            self.allocate()

    # The synchronous ModelRunner interface.
    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Run one batch and wait; copies of the outputs the caller may keep."""
        self._sync.infer({0: np.ascontiguousarray(batch)}, share_inputs=True)
        return [np.array(self._sync.get_output_tensor(i).data) for i in range(len(self.outputs))]

    # The staged interface: one slot per infer request.
    @property
    def allocated(self) -> bool:
        """Whether the slots' input buffers exist."""
        return bool(self._blocks)

    def allocate(self) -> None:
        """The slots' input buffers from the host pool, zeroed; nothing the second time."""
        if self._blocks:
            return
        self._blocks, self._host = host_slots(
            self._shape, self.inputs[0].dtype, self.slots, self.pool_owner
        )

    def io_bytes(self) -> int:
        """Bytes of input buffers held (0 before allocate); outputs are OpenVINO's own."""
        return sum(b.nbytes for b in self._blocks)

    def acquire(self) -> int:
        if not self._blocks:
            raise RuntimeError("openvino runner has no batch buffers: call allocate() first")
        return self._ring.acquire()

    def host_input(self, slot: int) -> np.ndarray:
        return self._host[slot]

    def launch(self, slot: int, n: int) -> None:
        rows = self.fixed_batch if self.fixed_batch is not None else n
        req = self._requests[slot]
        # Zero copy: the request reads the slot's buffer, untouched until wait().
        req.set_input_tensor(ov.Tensor(self._host[slot][:rows], shared_memory=True))
        req.start_async()
        self._ring.launched(slot, _Done(req))

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        req = self._requests[slot]
        req.wait()
        self._ring.read(slot)
        outs = [req.get_output_tensor(i).data for i in range(len(self.outputs))]
        if self.fixed_batch is None or n == self.fixed_batch:
            # Exactly n rows ran; outputs without a batch axis (Paddle's [K, 6]) stay whole.
            return outs
        return [o[:n] for o in outs]

    def close(self) -> None:
        for req in self._requests:
            req.wait()
        self._requests = []
        pool = host_pool()
        for b in self._blocks:
            pool.release(b)
        self._blocks = []
        self._host = []
        del self.compiled


def compile_model(path: Path, opts: OpenVinoOptions) -> Any:
    """`path` compiled for `opts.device` in throughput mode, through the cache when set."""
    device = opts.device
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    if device.split(".", maxsplit=1)[0] not in DEVICES:
        raise ModelLoadError(
            f"OpenVINO device {device!r} unknown; set edge.runtime.openvino_device to one "
            f"of {', '.join(DEVICES)}"
        )
    if opts.precision not in PRECISIONS:
        raise ModelLoadError(
            f"OpenVINO precision {opts.precision!r} unknown; use one of {', '.join(PRECISIONS)}"
        )
    core = ov.Core()
    if device not in core.available_devices:
        raise ModelLoadError(
            f"OpenVINO sees no {device} device here (it sees "
            f"{', '.join(core.available_devices) or 'none'}); set "
            "edge.runtime.openvino_device: CPU, or install the device's driver"
        )
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_PRECISION_HINT": opts.precision,
    }
    if opts.threads > 0 and device == "CPU":
        config["INFERENCE_NUM_THREADS"] = opts.threads
    if opts.streams > 0:
        config["NUM_STREAMS"] = opts.streams
    if opts.cache_dir:
        cache = Path(opts.cache_dir).expanduser()
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelLoadError(
                f"cannot create the OpenVINO cache folder {cache} ({exc.strerror}); set "
                "edge.runtime.openvino_cache to a writable folder, or empty to compile at "
                "every start"
            ) from None
        config["CACHE_DIR"] = str(cache)
    try:
        if path.suffix.lower() != ".onnx":
            # An IR (the quantizer's INT8 variant) has its rewrites already: from the path, so
            # a cache hit skips reading it too.
            return core.compile_model(str(path), device, config)
        model = core.read_model(str(path))
        if opts.batch > 0:
            shape = model.inputs[0].get_partial_shape()
            shape[0] = opts.batch
            model.reshape({model.inputs[0]: shape})
        fused = fuse_hard_swish(model)
        if fused:
            log.info("openvino: %s: %d hard-swishes fused into HSwish", path.name, fused)
        return core.compile_model(model, device, config)
    except Exception as exc:  # OpenVINO raises RuntimeError for everything
        raise ModelLoadError(
            f"OpenVINO cannot compile {path} for {device}: {_reason(exc)}. Check the file with "
            f"`strata models check {path}`, re-export it as ONNX (opset 11 or later), or "
            "set edge.runtime.backend: onnxruntime-cpu (the fallback)"
        ) from exc


def _reason(exc: Exception) -> str:
    """OpenVINO's message without its source-location lines ("Exception from x.cpp:132:")."""
    lines = [
        ln.strip()
        for ln in str(exc).splitlines()
        if ln.strip() and not ln.startswith(("Exception from ", "Check '"))
    ]
    return " ".join(lines).rstrip(".") or repr(exc)


def _property(compiled: Any, name: str, default: Any) -> Any:
    try:
        return compiled.get_property(name)
    except Exception:  # a device without that property
        return default
