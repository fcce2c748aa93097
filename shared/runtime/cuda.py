"""CUDA through cuda-python: pinned host memory, device memory, streams, events, copies.

Only GPU back ends import this module. Every call checks its status and raises CudaError
naming the call, so a failure on a GPU host reads as what it is.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .base import ModelLoadError


class CudaError(RuntimeError):
    """A CUDA runtime call failed."""


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime  # cuda-python >= 12.6

        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart  # older cuda-python

        return cudart
    except ImportError as exc:
        raise ModelLoadError("GPU back ends need cuda-python (pip install 'strata[gpu]')") from exc


class Cuda:
    """The few runtime calls the staged runners need, on one device."""

    def __init__(self, device_id: int = 0) -> None:
        self.rt = _cudart()
        self.device_id = device_id
        self.check(self.rt.cudaSetDevice(device_id), "cudaSetDevice")

    def check(self, result: Any, what: str) -> Any:
        """Unpack a cuda-python (err, *values) tuple; raise on error."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _e, name = self.rt.cudaGetErrorName(err)
            raise CudaError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray, int]:
        """Page-locked host memory as a numpy array (and its address, to free it)."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        ptr = int(self.check(self.rt.cudaMallocHost(nbytes), "cudaMallocHost"))
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype).reshape(shape), ptr

    def malloc(self, nbytes: int) -> int:
        """Device memory address."""
        return int(self.check(self.rt.cudaMalloc(nbytes), "cudaMalloc"))

    def stream(self) -> Any:
        """A non-blocking stream (does not synchronize with the legacy default stream)."""
        return self.check(
            self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking), "cudaStreamCreate"
        )

    def event(self) -> CudaEvent:
        """A timing-free event (cheapest to record and query)."""
        ev = self.check(
            self.rt.cudaEventCreateWithFlags(self.rt.cudaEventDisableTiming), "cudaEventCreate"
        )
        return CudaEvent(self, ev)

    def h2d(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.check(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync H2D")

    def d2h(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.check(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync D2H")

    def memory_used(self) -> int:
        """Bytes in use on the device (all processes), from cudaMemGetInfo."""
        free, total = self.check(self.rt.cudaMemGetInfo(), "cudaMemGetInfo")
        return int(total) - int(free)

    def free_host(self, ptr: int) -> None:
        self.check(self.rt.cudaFreeHost(ptr), "cudaFreeHost")

    def free(self, ptr: int) -> None:
        self.check(self.rt.cudaFree(ptr), "cudaFree")

    def destroy_stream(self, stream: Any) -> None:
        self.check(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def device_name(self) -> str:
        props = self.check(
            self.rt.cudaGetDeviceProperties(self.device_id), "cudaGetDeviceProperties"
        )
        name = props.name
        return (name.decode() if isinstance(name, bytes) else str(name)).rstrip("\x00")


class CudaEvent:
    """A recorded point in a stream; the host waits on it (SlotRing's Event protocol)."""

    def __init__(self, cuda: Cuda, handle: Any) -> None:
        self.cuda = cuda
        self.handle = handle

    def record(self, stream: Any) -> None:
        self.cuda.check(self.cuda.rt.cudaEventRecord(self.handle, stream), "cudaEventRecord")

    def query(self) -> bool:
        err = self.cuda.rt.cudaEventQuery(self.handle)
        err = err[0] if isinstance(err, tuple) else err
        return int(err) == 0

    def synchronize(self) -> None:
        self.cuda.check(self.cuda.rt.cudaEventSynchronize(self.handle), "cudaEventSynchronize")

    def destroy(self) -> None:
        self.cuda.check(self.cuda.rt.cudaEventDestroy(self.handle), "cudaEventDestroy")
