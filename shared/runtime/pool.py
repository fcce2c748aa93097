"""Memory pools for staging and device buffers: one per (kind, device), with statistics.

A pool hands out blocks from an allocator (cudaMalloc, cudaMallocHost, PyTorch's caching
allocator, or plain host memory on the CPU path) and keeps released blocks for reuse, so a
runner reopened with the same shapes allocates nothing new. Every pool registers itself so
metrics can read reserved / in-use / peak bytes and fragmentation of all of them, and
`leaks(owner)` names the blocks an owner did not return before it stopped.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

log = logging.getLogger(__name__)

# cudaMalloc returns 256-byte aligned memory; blocks are rounded to it on every kind.
BLOCK_ALIGN = 256


class Allocator(Protocol):
    """Raw memory of one kind on one device."""

    def alloc(self, nbytes: int) -> int:
        """Address of `nbytes` new bytes."""
        ...

    def free(self, ptr: int) -> None:
        """Give back memory `alloc` returned."""
        ...


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A pool's state: bytes held from the allocator, handed out, the peak of handed out."""

    name: str
    kind: str
    device: int
    reserved: int
    in_use: int
    peak: int
    blocks_in_use: int
    blocks_cached: int

    @property
    def fragmentation(self) -> float:
        """Share of reserved bytes not in use (cached free blocks), 0..1."""
        return 0.0 if self.reserved == 0 else 1.0 - self.in_use / self.reserved


@dataclass(eq=False, slots=True)
class Block:
    """One allocation handed out by a pool."""

    ptr: int
    nbytes: int
    requested: int
    owner: str
    pool: MemoryPool = field(repr=False)

    def view(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """A numpy array over this block (host kinds only: host and pinned memory)."""
        if self.pool.kind == "device":
            raise TypeError("device memory has no host view")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if nbytes > self.nbytes:
            raise ValueError(f"view of {nbytes} B over a block of {self.nbytes} B")
        raw = (ctypes.c_byte * nbytes).from_address(self.ptr)
        return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype).reshape(shape)


_REGISTRY: weakref.WeakSet[MemoryPool] = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()


class MemoryPool:
    """Blocks from one allocator, cached by size for reuse; thread-safe."""

    def __init__(self, name: str, kind: str, device: int, allocator: Allocator) -> None:
        self.name = name
        self.kind = kind
        self.device = device
        self.allocator = allocator
        self._lock = threading.Lock()
        self._free_sizes: list[int] = []  # sorted sizes of cached free blocks
        self._free: dict[int, list[int]] = {}  # size -> addresses
        self._used: dict[int, Block] = {}
        self._reserved = 0
        self._in_use = 0
        self._peak = 0
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)

    def allocate(self, nbytes: int, owner: str) -> Block:
        """A block of at least `nbytes`: the smallest cached one up to twice the size, else new."""
        size = max(BLOCK_ALIGN, (nbytes + BLOCK_ALIGN - 1) // BLOCK_ALIGN * BLOCK_ALIGN)
        with self._lock:
            i = bisect.bisect_left(self._free_sizes, size)
            if i < len(self._free_sizes) and self._free_sizes[i] <= 2 * size:
                got = self._free_sizes.pop(i)
                ptr = self._free[got].pop()
                size = got
            else:
                ptr = self.allocator.alloc(size)
                self._reserved += size
            block = Block(ptr, size, nbytes, owner, self)
            self._used[ptr] = block
            self._in_use += size
            self._peak = max(self._peak, self._in_use)
            return block

    def release(self, block: Block) -> None:
        """Return a block to the cache (kept for reuse until `trim`)."""
        with self._lock:
            if self._used.pop(block.ptr, None) is None:
                raise ValueError(f"block {block.ptr:#x} is not in use in pool {self.name}")
            self._in_use -= block.nbytes
            bisect.insort(self._free_sizes, block.nbytes)
            self._free.setdefault(block.nbytes, []).append(block.ptr)

    def trim(self) -> int:
        """Give every cached free block back to the allocator; returns bytes freed."""
        with self._lock:
            freed = 0
            for size, ptrs in self._free.items():
                for ptr in ptrs:
                    self.allocator.free(ptr)
                    freed += size
            self._free.clear()
            self._free_sizes.clear()
            self._reserved -= freed
            return freed

    def leaks(self, owner: str) -> list[Block]:
        """Blocks `owner` still holds (call after it stopped: each is a leak)."""
        with self._lock:
            return [b for b in self._used.values() if b.owner == owner]

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                self.name,
                self.kind,
                self.device,
                self._reserved,
                self._in_use,
                self._peak,
                len(self._used),
                len(self._free_sizes),
            )


def all_pools() -> list[MemoryPool]:
    """Every pool alive in this process, by name."""
    with _REGISTRY_LOCK:
        return sorted(_REGISTRY, key=lambda p: (p.kind, p.device, p.name))


def report_leaks(owner: str, on_leak: Callable[[Block], None] | None = None) -> int:
    """Log (and pass to `on_leak`) every block `owner` left in any pool; returns the count."""
    count = 0
    for pool in all_pools():
        for block in pool.leaks(owner):
            count += 1
            log.error(
                "memory leak: %s still holds %d B (%d asked) in pool %s at stop",
                owner,
                block.nbytes,
                block.requested,
                pool.name,
            )
            if on_leak is not None:
                on_leak(block)
    return count


class HostAllocator:
    """Plain host memory (the CPU path), each allocation a numpy buffer kept alive here."""

    def __init__(self) -> None:
        self._keep: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int) -> int:
        # Over-allocate to align the start like cudaMalloc does.
        raw = np.empty(nbytes + BLOCK_ALIGN, np.uint8)
        ptr = (raw.ctypes.data + BLOCK_ALIGN - 1) // BLOCK_ALIGN * BLOCK_ALIGN
        self._keep[ptr] = raw
        return int(ptr)

    def free(self, ptr: int) -> None:
        del self._keep[ptr]


_HOST_POOL: MemoryPool | None = None
_HOST_LOCK = threading.Lock()


def host_pool() -> MemoryPool:
    """The process's pool of host memory (staging buffers of the CPU path)."""
    global _HOST_POOL
    with _HOST_LOCK:
        if _HOST_POOL is None:
            _HOST_POOL = MemoryPool("host", "host", -1, HostAllocator())
        return _HOST_POOL


class PoolCollector:
    """Prometheus collector over every pool of the process (read at scrape time)."""

    def __init__(self, prefix: str = "strata") -> None:
        self.prefix = prefix

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        labels = ("pool", "kind", "device")
        size = GaugeMetricFamily(
            f"{self.prefix}_memory_pool_bytes",
            "Pool bytes by state: reserved (held from the allocator), in_use, peak in use.",
            labels=(*labels, "state"),
        )
        frag = GaugeMetricFamily(
            f"{self.prefix}_memory_pool_fragmentation_ratio",
            "Share of a pool's reserved bytes cached but not in use.",
            labels=labels,
        )
        blocks = GaugeMetricFamily(
            f"{self.prefix}_memory_pool_blocks",
            "Blocks handed out and not yet returned.",
            labels=labels,
        )
        for pool in all_pools():
            st = pool.stats()
            key = [st.name, st.kind, str(st.device)]
            size.add_metric([*key, "reserved"], st.reserved)
            size.add_metric([*key, "in_use"], st.in_use)
            size.add_metric([*key, "peak"], st.peak)
            frag.add_metric(key, st.fragmentation)
            blocks.add_metric(key, st.blocks_in_use)
        yield from (size, frag, blocks)

    def describe(self) -> Any:
        return iter(())
