"""The pinned-buffer, N-stream skeleton shared by the cuda-python GPU back ends.

Per slot (one per stream), allocated once: a page-locked host input and output, a device
input and output sized for the maximum batch, a stream and an event. `launch` queues
host->device copy, the back end's inference and device->host copy on the slot's stream and
records the event; `wait` synchronizes on that event only. Nothing is allocated per batch.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import TensorSpec
from .cuda import Cuda, CudaEvent
from .staging import BufferPlan, SlotRing


@dataclass(slots=True)
class Slot:
    """One stream's buffers."""

    stream: Any
    event: CudaEvent
    host_in: np.ndarray
    host_in_ptr: int
    host_out: list[np.ndarray]
    host_out_ptrs: list[int]
    dev_in: int
    dev_out: list[int]


class CudaStagedRunner(abc.ABC):
    """Base of the cuda-python staged back ends; subclasses implement `_infer`."""

    backend = "cuda"

    def __init__(self, cuda: Cuda, plan: BufferPlan) -> None:
        self.cuda = cuda
        self.plan = plan
        self.slots = plan.slots
        self.max_batch = plan.inputs[0].shape[0]
        self._ring = SlotRing(plan.slots)
        self._slots: list[Slot] = []
        for _ in range(plan.slots):
            tin = plan.inputs[0]
            host_in, host_in_ptr = cuda.pinned(tin.shape, tin.dtype)
            outs = [cuda.pinned(t.shape, t.dtype) for t in plan.outputs]
            self._slots.append(
                Slot(
                    stream=cuda.stream(),
                    event=cuda.event(),
                    host_in=host_in,
                    host_in_ptr=host_in_ptr,
                    host_out=[o[0] for o in outs],
                    host_out_ptrs=[o[1] for o in outs],
                    dev_in=cuda.malloc(tin.aligned),
                    dev_out=[cuda.malloc(t.aligned) for t in plan.outputs],
                )
            )
        self.inputs: tuple[TensorSpec, ...] = tuple(
            TensorSpec(t.name, (None, *t.shape[1:]), t.dtype) for t in plan.inputs
        )
        self.outputs: tuple[TensorSpec, ...] = tuple(
            TensorSpec(t.name, (None, *t.shape[1:]), t.dtype) for t in plan.outputs
        )

    # -- StagedRunner ----------------------------------------------------------------------

    def acquire(self) -> int:
        return self._ring.acquire()

    def host_input(self, slot: int) -> np.ndarray:
        return self._slots[slot].host_in

    def launch(self, slot: int, n: int) -> None:
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"batch of {n} outside 1..{self.max_batch}")
        s = self._slots[slot]
        row_in = self.plan.inputs[0].nbytes // self.max_batch
        self.cuda.h2d(s.dev_in, s.host_in_ptr, row_in * n, s.stream)
        self._infer(slot, s, n)
        for t, dev, host in zip(self.plan.outputs, s.dev_out, s.host_out_ptrs, strict=True):
            self.cuda.d2h(host, dev, t.nbytes // self.max_batch * n, s.stream)
        s.event.record(s.stream)
        self._ring.launched(slot, s.event)

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        s = self._slots[slot]
        s.event.synchronize()
        return [o[:n] for o in s.host_out]

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Synchronous convenience (ModelRunner): copies through one slot, returns copies."""
        slot = self.acquire()
        n = int(batch.shape[0])
        self.host_input(slot)[:n] = batch
        self.launch(slot, n)
        return [o.copy() for o in self.wait(slot, n)]

    def memory_used(self) -> int:
        return self.cuda.memory_used()

    def close(self) -> None:
        for s in self._slots:
            s.event.synchronize()
            s.event.destroy()
            self.cuda.destroy_stream(s.stream)
            self.cuda.free_host(s.host_in_ptr)
            for p in s.host_out_ptrs:
                self.cuda.free_host(p)
            self.cuda.free(s.dev_in)
            for d in s.dev_out:
                self.cuda.free(d)
        self._slots = []
        self._close_backend()

    # -- for subclasses --------------------------------------------------------------------

    @abc.abstractmethod
    def _infer(self, slot: int, s: Slot, n: int) -> None:
        """Queue inference of rows [:n] from s.dev_in into s.dev_out on s.stream."""

    def _close_backend(self) -> None:  # noqa: B027 - optional hook for back ends
        """Release engines and sessions."""
