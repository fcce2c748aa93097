"""PyTorch CUDA runner of the same ONNX model (onnx2torch), for GPU hosts without TensorRT.

Same staged design as the cuda-python back ends, with PyTorch's own primitives: pinned
host tensors (exposed to the caller as numpy views), preallocated device inputs, one
torch.cuda.Stream and Event per slot, non-blocking copies. FP16 halves the module and its
inputs where asked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .base import ModelLoadError, TensorSpec
from .staging import SlotRing

log = logging.getLogger(__name__)


class TorchCudaRunner:
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
        **_ignored: Any,
    ) -> None:
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

        self._torch = torch
        self.device = torch.device("cuda", device_id)
        proto = onnx.load(str(path))
        in_name = proto.graph.input[0].name
        dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
        chw = tuple(d if d > 0 else input_size for d in dims[1:])
        module = convert(proto).eval().to(self.device)
        dtype = torch.float16 if fp16 else torch.float32
        if fp16:
            module = module.half()
        self.module = module
        self.slots = streams
        self.max_batch = max_batch
        self._streams = [torch.cuda.Stream(device=self.device) for _ in range(streams)]
        self._events = [torch.cuda.Event() for _ in range(streams)]
        self._host_in = [
            torch.empty((max_batch, *chw), dtype=dtype, pin_memory=True) for _ in range(streams)
        ]
        self._dev_in = [
            torch.empty((max_batch, *chw), dtype=dtype, device=self.device) for _ in range(streams)
        ]
        with torch.inference_mode():
            probe = self._forward(self._dev_in[0][:max_batch])
        self._host_out = [
            [torch.empty(tuple(p.shape), dtype=p.dtype, pin_memory=True) for p in probe]
            for _ in range(streams)
        ]
        self._host_in_np: list[np.ndarray] = [t.numpy() for t in self._host_in]
        self._host_out_np: list[list[np.ndarray]] = [
            [t.numpy() for t in outs] for outs in self._host_out
        ]
        self._ring = SlotRing(streams)
        np_dtype = np.dtype(np.float16 if fp16 else np.float32)
        self.inputs = (TensorSpec(in_name, (None, *chw), np_dtype),)
        self.outputs = tuple(
            TensorSpec(f"output{i}", (None, *p.shape[1:]), np.dtype(str(p.dtype).split(".")[1]))
            for i, p in enumerate(probe)
        )
        log.info("torch-cuda: %s on %s, %d streams, fp16=%s", path.name, self.device, streams, fp16)

    def _forward(self, x: Any) -> list[Any]:
        out = self.module(x)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def acquire(self) -> int:
        return self._ring.acquire()

    def host_input(self, slot: int) -> np.ndarray:
        return self._host_in_np[slot]

    def launch(self, slot: int, n: int) -> None:
        torch = self._torch
        stream = self._streams[slot]
        with torch.cuda.stream(stream), torch.inference_mode():
            self._dev_in[slot][:n].copy_(self._host_in[slot][:n], non_blocking=True)
            outs = self._forward(self._dev_in[slot][:n])
            for host, dev in zip(self._host_out[slot], outs, strict=True):
                host[:n].copy_(dev, non_blocking=True)
            self._events[slot].record(stream)
        self._ring.launched(slot, self._events[slot])

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        self._events[slot].synchronize()
        return [o[:n] for o in self._host_out_np[slot]]

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        slot = self.acquire()
        n = int(batch.shape[0])
        self.host_input(slot)[:n] = batch
        self.launch(slot, n)
        return [o.copy() for o in self.wait(slot, n)]

    def memory_used(self) -> int:
        return int(self._torch.cuda.memory_allocated(self.device))

    def close(self) -> None:
        for ev in self._events:
            ev.synchronize()
        del self.module
