"""The pinned-buffer, N-stream skeleton every GPU back end shares.

Per slot (one per stream), allocated once from the device's pools: a page-locked host
input and output, a device input and output sized for the maximum batch, a stream and an
event. `launch` queues host->device copy, the back end's inference and device->host copy
on the slot's stream and records the event; `wait` synchronizes on that event only.
Nothing is allocated per batch. The device underneath is cuda-python (`cuda.Cuda`) or
PyTorch (`torch_cuda.TorchDevice`); back ends implement `_infer` (and `_close_backend`,
`_bind_buffers`).

The buffers are a separate step, `allocate()`, which the constructor runs unless told not
to (`allocate=False`): a standby (edge/inference/standby.py) holds the engine or sessions built and
no slot, no stream of its own and no pinned or device I/O byte, and allocates them when it
takes over.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .base import TensorSpec
from .pool import Block
from .staging import BufferPlan, SlotRing


class DeviceEvent(Protocol):
    def record(self, stream: Any) -> None: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...

    def destroy(self) -> None: ...


class Device(Protocol):
    """The CUDA calls the skeleton makes (cuda-python or PyTorch underneath)."""

    device_id: int

    def bind(self) -> None: ...

    def pinned(self, nbytes: int, owner: str) -> Block: ...

    def malloc(self, nbytes: int, owner: str) -> Block: ...

    def release(self, block: Block) -> None: ...

    def stream(self) -> Any: ...

    def event(self) -> DeviceEvent: ...

    def h2d(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    def d2h(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    def memory_used(self) -> int: ...

    def destroy_stream(self, stream: Any) -> None: ...


@dataclass(slots=True)
class Slot:
    """One stream's buffers."""

    stream: Any
    event: DeviceEvent
    host_in: np.ndarray
    host_out: list[np.ndarray]
    host_in_block: Block
    host_out_blocks: list[Block]
    dev_in_block: Block
    dev_out_blocks: list[Block]

    @property
    def host_in_ptr(self) -> int:
        return self.host_in_block.ptr

    @property
    def host_out_ptrs(self) -> list[int]:
        return [b.ptr for b in self.host_out_blocks]

    @property
    def dev_in(self) -> int:
        return self.dev_in_block.ptr

    @property
    def dev_out(self) -> list[int]:
        return [b.ptr for b in self.dev_out_blocks]


class CudaStagedRunner(abc.ABC):
    """Base of the GPU staged back ends; subclasses implement `_infer`."""

    backend = "cuda"

    def __init__(
        self,
        cuda: Device,
        plan: BufferPlan,
        allocate: bool = True,
        streams: Sequence[Any] | None = None,
    ) -> None:
        """`streams`: one per slot, made by the back end (its sessions compute on them) and
        owned by the runner from here on; without them `allocate()` makes its own."""
        self.cuda = cuda
        self.plan = plan
        self.slots = plan.slots
        self.max_batch = plan.inputs[0].shape[0]
        self.pool_owner = f"{self.backend}@{id(self):x}"
        self._ring = SlotRing(plan.slots)
        self._slots: list[Slot] = []
        self._streams: list[Any] = list(streams) if streams is not None else []
        self._closed = False
        self.inputs: tuple[TensorSpec, ...] = tuple(
            TensorSpec(t.name, (None, *t.shape[1:]), t.dtype) for t in plan.inputs
        )
        self.outputs: tuple[TensorSpec, ...] = tuple(
            TensorSpec(t.name, (None, *t.shape[1:]), t.dtype) for t in plan.outputs
        )
        if allocate:
            self.allocate()

    @property
    def allocated(self) -> bool:
        """Whether the batch buffers exist (`allocate()` ran)."""
        return bool(self._slots)

    def allocate(self) -> None:
        """Streams, events and every slot's pinned and device buffers, from the pools; then
        the back end binds them (`_bind_buffers`). Does nothing the second time."""
        if self._slots:
            return
        if self._closed:
            raise RuntimeError(f"{self.backend} runner is closed")
        cuda = self.cuda
        cuda.bind()
        if not self._streams:
            self._streams = [cuda.stream() for _ in range(self.plan.slots)]
        tin = self.plan.inputs[0]
        slots: list[Slot] = []
        taken: list[Block] = []

        def take(block: Block) -> Block:
            taken.append(block)
            return block

        try:
            for stream in self._streams:
                host_in = take(cuda.pinned(tin.nbytes, self.pool_owner))
                outs = [take(cuda.pinned(t.nbytes, self.pool_owner)) for t in self.plan.outputs]
                dev_in = take(cuda.malloc(tin.aligned, self.pool_owner))
                dev_outs = [
                    take(cuda.malloc(t.aligned, self.pool_owner)) for t in self.plan.outputs
                ]
                slot = Slot(
                    stream=stream,
                    event=cuda.event(),
                    host_in=host_in.view(tin.shape, tin.dtype),
                    host_out=[
                        b.view(t.shape, t.dtype)
                        for b, t in zip(outs, self.plan.outputs, strict=True)
                    ],
                    host_in_block=host_in,
                    host_out_blocks=outs,
                    dev_in_block=dev_in,
                    dev_out_blocks=dev_outs,
                )
                # Pooled memory may be a previous owner's: a first (warm-up) batch reads zeros.
                slot.host_in.fill(0)
                slots.append(slot)
        except BaseException:
            # Out of memory part-way (a take-over on a full GPU): give back what was taken.
            for s in slots:
                s.event.destroy()
            for b in taken:
                cuda.release(b)
            raise
        self._slots = slots
        self._bind_buffers()

    def io_bytes(self) -> int:
        """Bytes of pinned host and device I/O buffers this runner holds (0 before allocate)."""
        return sum(
            b.nbytes
            for s in self._slots
            for b in (s.host_in_block, *s.host_out_blocks, s.dev_in_block, *s.dev_out_blocks)
        )

    # -- StagedRunner ----------------------------------------------------------------------

    def acquire(self) -> int:
        if not self._slots:
            raise RuntimeError(f"{self.backend} runner has no batch buffers: call allocate() first")
        return self._ring.acquire()

    def host_input(self, slot: int) -> np.ndarray:
        return self._slots[slot].host_in

    def launch(self, slot: int, n: int) -> None:
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"batch of {n} outside 1..{self.max_batch}")
        # The calling thread (the edge's worker, not the one that built us) must be on our
        # device before it queues copies and kernels.
        self.cuda.bind()
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
        self._ring.read(slot)
        return [o[:n] for o in s.host_out]

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Synchronous convenience (ModelRunner): any batch size, in chunks of max_batch."""
        total = int(batch.shape[0])
        parts: list[list[np.ndarray]] = []
        for start in range(0, total, self.max_batch):
            chunk = batch[start : start + self.max_batch]
            n = int(chunk.shape[0])
            slot = self.acquire()
            self.host_input(slot)[:n] = chunk
            self.launch(slot, n)
            parts.append([o.copy() for o in self.wait(slot, n)])
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate(outs) for outs in zip(*parts, strict=True)]

    def memory_used(self) -> int:
        return self.cuda.memory_used()

    def close(self) -> None:
        """Wait for queued work, release the engine or sessions (which may still reference
        the streams and buffers), then the events and streams, then return the buffers."""
        if self._closed:
            return
        self._closed = True
        self.cuda.bind()
        for s in self._slots:
            s.event.synchronize()
        self._close_backend()
        for s in self._slots:
            s.event.destroy()
        for stream in self._streams:
            self.cuda.destroy_stream(stream)
        for s in self._slots:
            for b in (s.host_in_block, *s.host_out_blocks, s.dev_in_block, *s.dev_out_blocks):
                self.cuda.release(b)
        self._slots = []
        self._streams = []

    # -- for subclasses --------------------------------------------------------------------

    @abc.abstractmethod
    def _infer(self, slot: int, s: Slot, n: int) -> None:
        """Queue inference of rows [:n] from s.dev_in into s.dev_out on s.stream."""

    def _bind_buffers(self) -> None:  # noqa: B027 - optional hook for back ends
        """Point the engine or sessions at the slots' device buffers (after `allocate`)."""

    def _close_backend(self) -> None:  # noqa: B027 - optional hook for back ends
        """Release engines and sessions."""
