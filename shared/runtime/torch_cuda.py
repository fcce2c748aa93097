"""PyTorch CUDA runner of the same ONNX model (onnx2torch), for GPU hosts without TensorRT.

The staged skeleton of the other GPU back ends (`cuda_staged.CudaStagedRunner`: pooled
pinned and device buffers, one stream and event per slot, copies on the slot's stream)
over PyTorch's primitives (`TorchDevice`). Inference reads the slot's device input and
writes into its preallocated device output; each (slot, batch size) is captured once as a
CUDA graph, so a replay allocates nothing (eager fallback, logged, where capture fails).
FP16 halves the module and its inputs where asked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .cuda import DeviceBinding
from .cuda_staged import CudaStagedRunner, Slot
from .pool import MemoryPool
from .staging import plan_buffers
from .trt_engine import model_input

log = logging.getLogger(__name__)


class _TorchAllocator:
    """Raw bytes from PyTorch's caching allocator (device) or pinned host memory."""

    def __init__(self, torch: Any, device: Any, pinned: bool) -> None:
        self.torch = torch
        self.device = device
        self.pinned = pinned
        self.tensors: dict[int, Any] = {}

    def alloc(self, nbytes: int) -> int:
        t = self.torch
        if self.pinned:
            buf = t.empty(nbytes, dtype=t.uint8, pin_memory=True)
        else:
            buf = t.empty(nbytes, dtype=t.uint8, device=self.device)
        ptr = int(buf.data_ptr())
        self.tensors[ptr] = buf
        return ptr

    def free(self, ptr: int) -> None:
        del self.tensors[ptr]


class _TorchEvent:
    def __init__(self, torch: Any) -> None:
        self.ev = torch.cuda.Event()

    def record(self, stream: Any) -> None:
        self.ev.record(stream)

    def query(self) -> bool:
        return bool(self.ev.query())

    def synchronize(self) -> None:
        self.ev.synchronize()

    def destroy(self) -> None:
        pass


_DEVICES: dict[int, TorchDevice] = {}


class TorchDevice:
    """The skeleton's device calls through PyTorch, with this device's two pools."""

    def __init__(self, torch: Any, device_id: int) -> None:
        self.torch = torch
        self.device_id = device_id
        self.device = torch.device("cuda", device_id)
        self._binding = DeviceBinding(device_id, torch.cuda.set_device)
        self._pinned = _TorchAllocator(torch, self.device, pinned=True)
        self._dev = _TorchAllocator(torch, self.device, pinned=False)
        self.pinned_pool = MemoryPool(f"torch{device_id}-pinned", "pinned", device_id, self._pinned)
        self.device_pool = MemoryPool(f"torch{device_id}-device", "device", device_id, self._dev)

    @classmethod
    def for_device(cls, torch: Any, device_id: int) -> TorchDevice:
        dev = _DEVICES.get(device_id)
        if dev is None:
            dev = _DEVICES[device_id] = cls(torch, device_id)
        return dev

    def bind(self) -> None:
        self._binding.ensure()

    def pinned(self, nbytes: int, owner: str) -> Any:
        return self.pinned_pool.allocate(nbytes, owner)

    def malloc(self, nbytes: int, owner: str) -> Any:
        return self.device_pool.allocate(nbytes, owner)

    def release(self, block: Any) -> None:
        block.pool.release(block)

    def tensor(self, ptr: int) -> Any:
        """The uint8 tensor behind a pooled address (device or pinned)."""
        t = self._dev.tensors.get(ptr)
        return t if t is not None else self._pinned.tensors[ptr]

    def stream(self) -> Any:
        return self.torch.cuda.Stream(device=self.device)

    def event(self) -> _TorchEvent:
        return _TorchEvent(self.torch)

    def _copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        with self.torch.cuda.stream(stream):
            self.tensor(dst)[:nbytes].copy_(self.tensor(src)[:nbytes], non_blocking=True)

    def h2d(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._copy(dst, src, nbytes, stream)

    def d2h(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._copy(dst, src, nbytes, stream)

    def memory_used(self) -> int:
        return int(self.torch.cuda.memory_reserved(self.device))

    def destroy_stream(self, stream: Any) -> None:
        pass  # PyTorch streams are freed with their Python object


class TorchCudaRunner(CudaStagedRunner):
    """An onnx2torch module on CUDA behind the staged interface."""

    backend = "torch-cuda"

    def __init__(
        self,
        path: str | Path,
        device_id: int = 0,
        streams: int = 2,
        fp16: bool = True,
        max_batch: int = 8,
        input_size: int = 640,
        cuda_graphs: bool = True,
        allocate: bool = True,
        **_ignored: Any,
    ) -> None:
        """`allocate=False`: the module on the device only; buffers wait for `allocate()`."""
        try:
            import torch
            from onnx2torch import convert
        except ImportError as exc:
            raise ModelLoadError(
                f"the torch-cuda back end needs torch with CUDA and onnx2torch ({exc.name})"
            ) from exc
        if not torch.cuda.is_available():
            raise ModelLoadError("torch-cuda: PyTorch sees no CUDA device")
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        import onnx

        inp = model_input(path)
        if inp.fixed_batch is not None and inp.fixed_batch != max_batch:
            log.warning(
                "%s has a fixed batch of %d: max batch %d -> %d",
                path.name,
                inp.fixed_batch,
                max_batch,
                inp.fixed_batch,
            )
            max_batch = inp.fixed_batch
        chw = inp.chw(input_size)
        self._torch = torch
        dev = TorchDevice.for_device(torch, device_id)
        dev.bind()
        module = convert(onnx.load(str(path))).eval().to(dev.device)
        tdtype = torch.float16 if fp16 else torch.float32
        if fp16:
            module = module.half()
        self.module = module
        with torch.inference_mode():
            probe = self._forward(torch.zeros((max_batch, *chw), dtype=tdtype, device=dev.device))
        np_in = np.dtype(np.float16 if fp16 else np.float32)
        outs = [
            TensorSpec(f"output{i}", (None, *p.shape[1:]), np.dtype(str(p.dtype).split(".")[1]))
            for i, p in enumerate(probe)
        ]
        plan = plan_buffers(
            [TensorSpec(inp.name, (None, *chw), np_in)],
            outs,
            max_batch,
            streams,
            input_shape=(max_batch, *chw),
            output_shapes=[(max_batch, *p.shape[1:]) for p in probe],
        )
        del probe
        # The probe's activations go back to the device, not to this process's cache: a
        # standby holds the module's weights only.
        torch.cuda.empty_cache()
        super().__init__(dev, plan, allocate=False)
        self._dev = dev
        self._tdtype = tdtype
        self._in_views: list[Any] = []
        self._out_views: list[list[Any]] = []
        self._use_graphs = cuda_graphs
        self._graphs: dict[tuple[int, int], Any] = {}
        self._graph_pools = [torch.cuda.graph_pool_handle() for _ in range(streams)]
        log.info("torch-cuda: %s on %s, %d streams, fp16=%s", path.name, dev.device, streams, fp16)
        if allocate:
            self.allocate()

    def _bind_buffers(self) -> None:
        # Typed device views of each slot's buffers (static addresses: graphs capture them).
        dev, tdtype, plan, torch = self._dev, self._tdtype, self.plan, self._torch
        self._in_views = [
            dev.tensor(s.dev_in)[: plan.inputs[0].nbytes].view(tdtype).view(plan.inputs[0].shape)
            for s in self._slots
        ]
        self._out_views = [
            [
                dev.tensor(p)[: t.nbytes].view(_torch_dtype(torch, t.dtype)).view(t.shape)
                for p, t in zip(s.dev_out, plan.outputs, strict=True)
            ]
            for s in self._slots
        ]

    def _forward(self, x: Any) -> list[Any]:
        out = self.module(x)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _eager(self, slot: int, n: int) -> None:
        outs = self._forward(self._in_views[slot][:n])
        for dst, src in zip(self._out_views[slot], outs, strict=True):
            dst[:n].copy_(src)

    def _graph(self, slot: int, s: Slot, n: int) -> Any:
        key = (slot, n)
        graph = self._graphs.get(key)
        if graph is not None or not self._use_graphs:
            return graph
        torch = self._torch
        try:
            with torch.cuda.stream(s.stream):
                self._eager(slot, n)  # warm-up outside capture (cuDNN picks its kernels)
            s.stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pools[slot], stream=s.stream):
                self._eager(slot, n)
        except Exception as exc:  # capture is best effort: some ops cannot be captured
            log.warning("torch-cuda: CUDA graph capture failed (%s); running eagerly", exc)
            self._use_graphs = False
            return None
        self._graphs[key] = graph
        return graph

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        torch = self._torch
        with torch.inference_mode():
            graph = self._graph(slot, s, n)
            with torch.cuda.stream(s.stream):
                if graph is not None:
                    graph.replay()
                else:
                    self._eager(slot, n)

    def memory_used(self) -> int:
        return int(self._torch.cuda.memory_allocated(self._dev.device))

    def _close_backend(self) -> None:
        self._graphs = {}
        self._in_views = []
        self._out_views = []
        del self.module


def _torch_dtype(torch: Any, dtype: np.dtype[Any]) -> Any:
    return {
        "float32": torch.float32,
        "float16": torch.float16,
        "int64": torch.int64,
        "int32": torch.int32,
        "uint8": torch.uint8,
        "bool": torch.bool,
    }[np.dtype(dtype).name]
