"""Staged execution: N buffer sets ("slots"), each tied to one stream, used round-robin.

A caller acquires a slot, writes a batch straight into that slot's host input buffer,
launches it (copy-in, inference, copy-out queued on the slot's stream) and later waits on
it. On a GPU the host buffers are page-locked and allocated once, and the launches of
different slots overlap; on the CPU (`HostStagedRunner`) the same interface runs the model
synchronously, so the edge node has one code path. The planning helpers here (buffer
sizes, slot rotation, optimization profiles) are pure Python so a CPU can test them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .base import ModelLoadError, ModelRunner, TensorSpec
from .pool import Block, host_pool

# cudaMalloc returns 256-byte aligned memory; TensorRT wants at least that for every tensor.
ALIGNMENT = 256


@dataclass(frozen=True, slots=True)
class TensorPlan:
    """One tensor of a slot at the maximum batch: its shape, dtype and aligned byte size."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]
    nbytes: int
    aligned: int


@dataclass(frozen=True, slots=True)
class BufferPlan:
    """Every buffer one slot needs, and the total over all slots (host and device alike)."""

    inputs: tuple[TensorPlan, ...]
    outputs: tuple[TensorPlan, ...]
    slots: int

    @property
    def slot_bytes(self) -> int:
        """Aligned bytes of one slot's tensors (inputs plus outputs)."""
        return sum(t.aligned for t in (*self.inputs, *self.outputs))

    @property
    def total_bytes(self) -> int:
        """Bytes of host (pinned) memory, and again of device memory, for all slots."""
        return self.slot_bytes * self.slots


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _concrete(spec: TensorSpec, max_batch: int, fallback: Sequence[int] | None) -> tuple[int, ...]:
    dims = list(spec.shape)
    if not dims:
        raise ModelLoadError(f"tensor {spec.name} has no shape")
    dims[0] = max_batch
    for i, d in enumerate(dims[1:], start=1):
        if d is None:
            if fallback is None or len(fallback) != len(dims) or fallback[i] <= 0:
                raise ModelLoadError(
                    f"tensor {spec.name} has a dynamic axis {i}; give its size to plan buffers"
                )
            dims[i] = int(fallback[i])
    return tuple(int(d) for d in dims if d is not None)


def plan_buffers(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    max_batch: int,
    slots: int,
    input_shape: Sequence[int] | None = None,
    output_shapes: Sequence[Sequence[int]] | None = None,
    dtype: np.dtype[np.generic] | None = None,
) -> BufferPlan:
    """Size every buffer for `max_batch`; dynamic non-batch axes come from the given shapes.

    `dtype` overrides the element type (an FP16 engine takes and returns float16).
    """
    if max_batch < 1 or slots < 1:
        raise ValueError("max_batch and slots must be at least 1")

    def plan(spec: TensorSpec, fallback: Sequence[int] | None) -> TensorPlan:
        shape = _concrete(spec, max_batch, fallback)
        dt = np.dtype(dtype) if dtype is not None else spec.dtype
        nbytes = int(np.prod(shape)) * dt.itemsize
        return TensorPlan(spec.name, shape, dt, nbytes, _aligned(nbytes))

    ins = tuple(plan(s, input_shape) for s in inputs)
    outs = tuple(
        plan(s, output_shapes[i] if output_shapes else None) for i, s in enumerate(outputs)
    )
    return BufferPlan(ins, outs, slots)


@dataclass(frozen=True, slots=True)
class Profile:
    """An optimization profile over the batch axis (TensorRT: min <= opt <= max).

    The one profile type of the project: the runtime's engine builder, the TensorRT and
    ORT-TensorRT runners and `strata models engine` all use it.
    """

    min_batch: int
    opt_batch: int
    max_batch: int

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ValueError(
                "profile needs 1 <= min <= opt <= max, got "
                f"{self.min_batch}/{self.opt_batch}/{self.max_batch}"
            )

    def __str__(self) -> str:
        return f"{self.min_batch}/{self.opt_batch}/{self.max_batch}"

    def shapes(self, chw: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """(min, opt, max) input shapes for a (C, H, W) image input."""
        rest = tuple(int(d) for d in chw)
        return tuple((b, *rest) for b in (self.min_batch, self.opt_batch, self.max_batch))

    def for_model_batch(self, fixed: int | None) -> Profile:
        """This profile for a model whose batch axis is `fixed` (None: dynamic, unchanged)."""
        if fixed is None:
            return self
        return Profile(fixed, fixed, fixed)

    def capped(self, max_batch: int) -> Profile:
        """This profile with its maximum lowered to `max_batch` (opt and min follow)."""
        top = max(1, min(self.max_batch, max_batch))
        low = min(self.min_batch, top)
        return Profile(low, min(max(self.opt_batch, low), top), top)


def engine_profile(
    min_shape: Sequence[int], opt_shape: Sequence[int], max_shape: Sequence[int], wanted_max: int
) -> Profile:
    """The profile to run a built engine with: its own, capped at the batch asked for.

    A prebuilt engine only takes batches inside the profile it was built with; a larger
    configured batch would give unresolved shapes, so the engine's maximum wins (and the
    caller says so). A wanted maximum below the engine's minimum cannot run at all.
    """
    lo, opt, hi = int(min_shape[0]), int(opt_shape[0]), int(max_shape[0])
    if wanted_max < lo:
        raise ModelLoadError(
            f"the engine's profile starts at batch {lo}; a max batch of {wanted_max} cannot run"
        )
    top = min(hi, wanted_max)
    return Profile(lo, min(max(opt, lo), top), top)


def select_profile(profiles: Sequence[Profile], batch: int) -> int:
    """Index of the profile to run `batch` with: the tightest one whose range holds it."""
    fits = [i for i, p in enumerate(profiles) if p.min_batch <= batch <= p.max_batch]
    if not fits:
        raise ValueError(f"batch {batch} is outside every optimization profile {profiles}")
    return min(
        fits,
        key=lambda i: (
            profiles[i].max_batch - profiles[i].min_batch,
            abs(profiles[i].opt_batch - batch),
        ),
    )


class Event(Protocol):
    """What a slot waits on: a CUDA event (or a stand-in that is always done)."""

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class SlotRing:
    """Round-robin over slots; a slot is reused only after its last launch has finished and
    its results were read (`read`, from the runner's wait): a batch launched between a
    pipeline's launches (a codec probe's, a canary's) takes a free slot, never one whose
    results another caller has yet to read."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("need at least one slot")
        self.slots = slots
        self._next = 0
        self._pending: list[Event | None] = [None] * slots
        self._unread = [False] * slots

    def acquire(self) -> int:
        """The next slot in turn whose results were read, waiting for its previous work if
        still running. RuntimeError when every slot holds results not yet read."""
        for k in range(self.slots):
            slot = (self._next + k) % self.slots
            if not self._unread[slot]:
                break
        else:
            raise RuntimeError(
                f"all {self.slots} slots hold results not yet read: wait() for a launched "
                "batch before acquiring another"
            )
        self._next = (slot + 1) % self.slots
        event = self._pending[slot]
        if event is not None:
            event.synchronize()
            self._pending[slot] = None
        return slot

    def launched(self, slot: int, event: Event | None) -> None:
        """Record the event that marks the end of `slot`'s work (None: done already); its
        results are unread until `read`."""
        self._pending[slot] = event
        self._unread[slot] = True

    def read(self, slot: int) -> None:
        """`slot`'s results were read: it may be acquired again."""
        self._unread[slot] = False

    def busy(self) -> int:
        """Slots whose work has not finished yet."""
        return sum(1 for e in self._pending if e is not None and not e.query())


@runtime_checkable
class StagedRunner(Protocol):
    """Slot-based asynchronous execution (see the module docstring)."""

    backend: str
    slots: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def acquire(self) -> int:
        """A free slot; blocks until the slot's previous work is done."""
        ...

    def host_input(self, slot: int) -> np.ndarray:
        """The slot's host input buffer (max_batch, C, H, W); write a batch into [:n]."""
        ...

    def launch(self, slot: int, n: int) -> None:
        """Queue copy-in, inference and copy-out of the first n rows on the slot's stream."""
        ...

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        """Block until the slot's work is done; views of its host outputs [:n] (reused)."""
        ...

    @property
    def allocated(self) -> bool:
        """Whether the batch buffers exist."""
        ...

    def allocate(self) -> None:
        """Allocate the batch buffers if a runner was built without them (a standby)."""
        ...

    def io_bytes(self) -> int:
        """Bytes of batch I/O buffers held (host, pinned and device together)."""
        ...

    def close(self) -> None: ...


def host_slots(
    shape: tuple[int, ...], dtype: np.dtype, slots: int, owner: str
) -> tuple[list[Block], list[np.ndarray]]:
    """`slots` zeroed input buffers of `shape` from the host pool, and their array views."""
    nbytes = int(np.prod(shape)) * dtype.itemsize
    pool = host_pool()
    blocks = [pool.allocate(nbytes, owner) for _ in range(slots)]
    host = [b.view(shape, dtype) for b in blocks]
    for h in host:
        h.fill(0)
    return blocks, host


class _FutureEvent:
    """A slot's batch running on a pool thread, as the ring's Event."""

    __slots__ = ("future",)

    def __init__(self, future: Future[list[np.ndarray]]) -> None:
        self.future = future

    def query(self) -> bool:
        return self.future.done()

    def synchronize(self) -> None:
        wait_futures([self.future])


class HostStagedRunner:
    """A ModelRunner on the host behind the staged interface, with buffers allocated once.

    With one slot a launch runs the model on the caller's thread. With more, each launch
    runs on a pool thread of its own (`slots` of them), so batches run side by side and
    the caller letterboxes the next batch and tracks the last one meanwhile; the runner
    must accept concurrent runs (an ONNX Runtime session does).

    The buffers come from the host memory pool, in `allocate()`, which the constructor runs
    unless told not to (a standby allocates when it takes over). A model whose batch axis
    is fixed (a common export: batch 1) caps `max_batch` at that size (`capped_from` says
    what was asked), and a partial batch runs padded to the fixed size.
    """

    def __init__(
        self,
        runner: ModelRunner,
        max_batch: int,
        input_chw: Sequence[int],
        slots: int = 1,
        allocate: bool = True,
    ) -> None:
        self.runner = runner
        self.backend = runner.backend
        self.inputs = runner.inputs
        self.outputs = runner.outputs
        self.slots = slots
        fixed = runner.inputs[0].shape[0] if runner.inputs[0].shape else None
        self.fixed_batch: int | None = int(fixed) if fixed else None
        self.capped_from: int | None = None
        if self.fixed_batch is not None and max_batch != self.fixed_batch:
            self.capped_from = max_batch
            max_batch = self.fixed_batch
        self.max_batch = max_batch
        self.pool_owner = f"{self.backend}@{id(self):x}"
        self._shape = (max_batch, *(int(d) for d in input_chw))
        self._blocks: list[Block] = []
        self._host: list[np.ndarray] = []
        self._results: list[list[np.ndarray]] = [[] for _ in range(slots)]
        self._futures: list[Future[list[np.ndarray]] | None] = [None] * slots
        self._pool = (
            ThreadPoolExecutor(slots, thread_name_prefix=f"{self.backend}-run")
            if slots > 1
            else None
        )
        self._ring = SlotRing(slots)
        if allocate:
            self.allocate()

    @property
    def allocated(self) -> bool:
        """Whether the batch buffers exist (`allocate()` ran)."""
        return bool(self._blocks)

    def allocate(self) -> None:
        """The slots' input buffers from the host pool, zeroed; nothing the second time."""
        if self._blocks:
            return
        self._blocks, self._host = host_slots(
            self._shape, self.runner.inputs[0].dtype, self.slots, self.pool_owner
        )

    def io_bytes(self) -> int:
        """Bytes of input buffers this runner holds (0 before allocate)."""
        return sum(b.nbytes for b in self._blocks)

    def acquire(self) -> int:
        if not self._blocks:
            raise RuntimeError(f"{self.backend} runner has no batch buffers: call allocate() first")
        return self._ring.acquire()

    def host_input(self, slot: int) -> np.ndarray:
        return self._host[slot]

    def launch(self, slot: int, n: int) -> None:
        rows = self.fixed_batch if self.fixed_batch is not None else n
        batch = self._host[slot][:rows]
        if self._pool is None:
            self._results[slot] = self.runner.run(batch)
            self._ring.launched(slot, None)
            return
        future = self._pool.submit(self.runner.run, batch)
        self._futures[slot] = future
        self._ring.launched(slot, _FutureEvent(future))

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        future = self._futures[slot]
        try:
            if future is not None:
                self._futures[slot] = None
                self._results[slot] = future.result()
        finally:
            self._ring.read(slot)  # a run that raised frees its slot too
        results = self._results[slot]
        if n == self.fixed_batch:
            # Nothing padded: outputs without a batch axis (Paddle's [K, 6]) stay whole.
            return results
        return [o[:n] for o in results]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.runner.close()
        pool = host_pool()
        for b in self._blocks:
            pool.release(b)
        self._blocks = []
        self._host = []
