"""A host-memory stand-in for the CUDA calls of the staged GPU runners (the Device protocol
of strata.shared.runtime.cuda_staged), for the tests a CPU can run.

`HostCuda` keeps "device" buffers in host memory and performs copies at once, so a
`CudaStagedRunner`'s byte counts, offsets, slot rotation, pools and event bookkeeping run
for real; only the CUDA runtime underneath is replaced (the gpu tests run the real one).
`HostOrtRunner` is a GPU back end over it: the constructor of the real ones (path,
device_id, streams, max_batch, input_size, allocate), ONNX Runtime CPU as its kernel on
the slot's "device" buffers. Registered in place of a GPU back end name (BACKENDS), it
takes the edge's real path (open_staged, StandbyModel) with only CUDA replaced.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import numpy as np
from strata.shared.runtime.cuda_staged import CudaStagedRunner, Slot
from strata.shared.runtime.onnxruntime_cpu import OnnxRuntimeRunner
from strata.shared.runtime.pool import Block, HostAllocator, MemoryPool
from strata.shared.runtime.staging import plan_buffers
from strata.shared.runtime.trt_engine import model_input


class HostEvent:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def record(self, stream: Any) -> None:
        self.log.append(f"record {stream}")

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.log.append("sync")

    def destroy(self) -> None:
        pass


class HostCuda:
    """Pinned and device memory both from host-memory pools; copies happen immediately."""

    device_id = 0

    def __init__(self) -> None:
        self.log: list[str] = []
        self.streams = 0
        self.bound: set[str] = set()
        self.pinned_pool = MemoryPool("test-pinned", "pinned", 0, HostAllocator())
        # "Device" memory is host memory here: a pool of kind host so the test can look.
        self.device_pool = MemoryPool("test-device", "host", 0, HostAllocator())

    def bind(self) -> None:
        name = threading.current_thread().name
        if name not in self.bound:
            self.bound.add(name)
            self.log.append(f"bind {name}")

    def pinned(self, nbytes: int, owner: str) -> Block:
        return self.pinned_pool.allocate(nbytes, owner)

    def malloc(self, nbytes: int, owner: str) -> Block:
        return self.device_pool.allocate(nbytes, owner)

    def release(self, block: Block) -> None:
        self.log.append("release")
        block.pool.release(block)

    def stream(self) -> int:
        self.streams += 1
        return self.streams

    def event(self) -> HostEvent:
        return HostEvent(self.log)

    def h2d(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self.log.append(f"h2d {nbytes} on {stream}")
        ctypes.memmove(dst, src, nbytes)

    def d2h(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self.log.append(f"d2h {nbytes} on {stream}")
        ctypes.memmove(dst, src, nbytes)

    def memory_used(self) -> int:
        return self.pinned_pool.stats().in_use + self.device_pool.stats().in_use

    def destroy_stream(self, stream: Any) -> None:
        self.log.append(f"destroy stream {stream}")


def host_array(ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A numpy view of `shape` over host memory at `ptr` (a stand-in device buffer)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = (ctypes.c_byte * nbytes).from_address(ptr)
    return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype).reshape(shape)


class HostOrtRunner(CudaStagedRunner):
    """A staged GPU back end on `HostCuda`: ONNX Runtime CPU reads the slot's device input
    and its outputs are written into the slot's device outputs."""

    backend = "host-ort"

    def __init__(
        self,
        path: str | Path,
        device_id: int = 0,
        streams: int = 2,
        max_batch: int = 8,
        input_size: int = 640,
        allocate: bool = True,
        **_ignored: Any,
    ) -> None:
        self.session = OnnxRuntimeRunner(path, threads=1)
        inp = model_input(Path(path))
        chw = inp.chw(input_size)
        probe = self.session.run(np.zeros((1, *chw), self.session.inputs[0].dtype))
        plan = plan_buffers(
            self.session.inputs,
            self.session.outputs,
            max_batch,
            streams,
            input_shape=(max_batch, *chw),
            output_shapes=[(max_batch, *p.shape[1:]) for p in probe],
        )
        super().__init__(HostCuda(), plan, allocate=False)
        self.bound = 0  # times _bind_buffers ran
        if allocate:
            self.allocate()

    def _bind_buffers(self) -> None:
        self.bound += 1

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        tin = self.plan.inputs[0]
        x = host_array(s.dev_in, tin.shape, tin.dtype)[:n]
        for t, ptr, out in zip(self.plan.outputs, s.dev_out, self.session.run(x), strict=True):
            host_array(ptr, t.shape, t.dtype)[:n] = out

    def _close_backend(self) -> None:
        self.session.close()
