"""CudaStagedRunner's copy plumbing on the CPU: a host-memory stand-in for the CUDA calls.

The stand-in keeps "device" buffers in host memory and performs copies at once, so the
runner's byte counts, offsets, slot rotation and event bookkeeping run for real; only the
CUDA runtime underneath is replaced (the GPU tests run the real one).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from strata.shared.runtime import TensorSpec
from strata.shared.runtime.cuda_staged import CudaStagedRunner, Slot
from strata.shared.runtime.staging import plan_buffers

F32 = np.dtype(np.float32)


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
    """Pinned and device memory both in host memory; copies happen immediately."""

    device_id = 0

    def __init__(self) -> None:
        self.keep: dict[int, Any] = {}
        self.log: list[str] = []
        self.streams = 0

    def _alloc(self, nbytes: int) -> int:
        buf = (ctypes.c_byte * nbytes)()
        addr = ctypes.addressof(buf)
        self.keep[addr] = buf
        return addr

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray, int]:
        nbytes = int(np.prod(shape)) * dtype.itemsize
        ptr = self._alloc(nbytes)
        raw = self.keep[ptr]
        return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype).reshape(shape), ptr

    def malloc(self, nbytes: int) -> int:
        return self._alloc(nbytes)

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
        return sum(ctypes.sizeof(b) for b in self.keep.values())

    def free_host(self, ptr: int) -> None:
        pass

    def free(self, ptr: int) -> None:
        pass

    def destroy_stream(self, stream: Any) -> None:
        pass


class Doubler(CudaStagedRunner):
    """'Inference' on the device buffers: output = 2 * sum of each input row."""

    backend = "doubler"

    def _infer(self, slot: int, s: Slot, n: int) -> None:
        tin, tout = self.plan.inputs[0], self.plan.outputs[0]
        x = np.ctypeslib.as_array(
            (ctypes.c_float * (tin.nbytes // 4)).from_address(s.dev_in)
        ).reshape(tin.shape)
        y = np.ctypeslib.as_array(
            (ctypes.c_float * (tout.nbytes // 4)).from_address(s.dev_out[0])
        ).reshape(tout.shape)
        y[:n, 0] = 2 * x[:n].reshape(n, -1).sum(axis=1)
        self.cuda.log.append(f"infer {n} on {s.stream}")  # type: ignore[attr-defined]


def test_staged_copies_move_exactly_the_batch_rows_on_the_slot_stream() -> None:
    cuda = HostCuda()
    plan = plan_buffers(
        [TensorSpec("x", (None, 2, 3), F32)], [TensorSpec("y", (None, 1), F32)], 4, 2
    )
    r = Doubler(cuda, plan)  # type: ignore[arg-type]
    try:
        jobs = []
        for n in (3, 1):
            slot = r.acquire()
            r.host_input(slot)[:n] = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) + n
            r.launch(slot, n)
            jobs.append((slot, n))
        assert [s for s, _n in jobs] == [0, 1]
        (s0, n0), (s1, n1) = jobs
        out0 = r.wait(s0, n0)[0]
        out1 = r.wait(s1, n1)[0]
        x0 = np.arange(18, dtype=np.float32).reshape(3, 6) + 3
        np.testing.assert_allclose(out0[:, 0], 2 * x0.sum(axis=1))
        np.testing.assert_allclose(out1[:, 0], [2 * (np.arange(6) + 1).sum()])
        # Per launch: copy-in of n rows (24 B each), inference, copy-out (4 B a row), event.
        assert cuda.log[:8] == [
            "h2d 72 on 1", "infer 3 on 1", "d2h 12 on 1", "record 1",
            "h2d 24 on 2", "infer 1 on 2", "d2h 4 on 2", "record 2",
        ]  # fmt: skip
        # The third launch reuses slot 0 and waits for its event first.
        assert r.acquire() == 0
        assert r.memory_used() >= plan.total_bytes
    finally:
        r.close()
