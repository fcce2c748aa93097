"""CUDA through cuda-python: pinned host memory, device memory, streams, events, copies.

Only GPU back ends import this module. Every call checks its status and raises CudaError
naming the call, so a failure on a GPU host reads as what it is.
"""

from __future__ import annotations

import threading
from typing import Any

from .base import ModelLoadError
from .pool import Block, MemoryPool


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


class DeviceBinding:
    """Makes `device_id` current in every thread that calls `ensure()`, once per thread.

    The CUDA runtime's current device is per thread: a runner built in one thread and
    driven from another (the edge's worker) would otherwise launch on device 0.
    """

    def __init__(self, device_id: int, set_device: Any) -> None:
        self.device_id = device_id
        self._set_device = set_device
        self._local = threading.local()

    def ensure(self) -> None:
        if getattr(self._local, "bound", False):
            return
        self._set_device(self.device_id)
        self._local.bound = True


class _PinnedAllocator:
    def __init__(self, cuda: Cuda) -> None:
        self.cuda = cuda

    def alloc(self, nbytes: int) -> int:
        self.cuda.bind()
        return int(self.cuda.check(self.cuda.rt.cudaMallocHost(nbytes), "cudaMallocHost"))

    def free(self, ptr: int) -> None:
        self.cuda.bind()
        self.cuda.check(self.cuda.rt.cudaFreeHost(ptr), "cudaFreeHost")


class _DeviceAllocator:
    def __init__(self, cuda: Cuda) -> None:
        self.cuda = cuda

    def alloc(self, nbytes: int) -> int:
        self.cuda.bind()
        return int(self.cuda.check(self.cuda.rt.cudaMalloc(nbytes), "cudaMalloc"))

    def free(self, ptr: int) -> None:
        self.cuda.bind()
        self.cuda.check(self.cuda.rt.cudaFree(ptr), "cudaFree")


_DEVICES: dict[int, Cuda] = {}
_DEVICES_LOCK = threading.Lock()


class Cuda:
    """The few runtime calls the staged runners need, on one device, with its two pools.

    One instance per device (`Cuda.for_device`), so every runner on a device shares its
    pinned-host and device memory pools.
    """

    def __init__(self, device_id: int = 0) -> None:
        self.rt = _cudart()
        self.device_id = device_id
        self._binding = DeviceBinding(
            device_id, lambda d: self.check(self.rt.cudaSetDevice(d), "cudaSetDevice")
        )
        self.bind()
        self.pinned_pool = MemoryPool(
            f"cuda{device_id}-pinned", "pinned", device_id, _PinnedAllocator(self)
        )
        self.device_pool = MemoryPool(
            f"cuda{device_id}-device", "device", device_id, _DeviceAllocator(self)
        )

    @classmethod
    def for_device(cls, device_id: int) -> Cuda:
        """The shared instance of a device."""
        with _DEVICES_LOCK:
            cuda = _DEVICES.get(device_id)
            if cuda is None:
                cuda = _DEVICES[device_id] = cls(device_id)
            return cuda

    def bind(self) -> None:
        """Make this device current in the calling thread (once per thread)."""
        self._binding.ensure()

    def check(self, result: Any, what: str) -> Any:
        """Unpack a cuda-python (err, *values) tuple; raise on error."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _e, name = self.rt.cudaGetErrorName(err)
            raise CudaError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def pinned(self, nbytes: int, owner: str) -> Block:
        """Page-locked host memory from the device's pinned pool (`Block.view` for numpy)."""
        return self.pinned_pool.allocate(nbytes, owner)

    def malloc(self, nbytes: int, owner: str) -> Block:
        """Device memory from the device's pool."""
        return self.device_pool.allocate(nbytes, owner)

    def release(self, block: Block) -> None:
        """Give a block back to its pool."""
        block.pool.release(block)

    def stream(self) -> Any:
        """A non-blocking stream (does not synchronize with the legacy default stream)."""
        self.bind()
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
