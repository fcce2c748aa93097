"""The memory pool over host memory (the CPU path's staging buffers), for real."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from strata.shared.runtime.pool import (
    HostAllocator,
    MemoryPool,
    all_pools,
    host_pool,
    report_leaks,
)


def test_blocks_are_aligned_reused_and_counted() -> None:
    pool = MemoryPool("t", "host", -1, HostAllocator())
    a = pool.allocate(1000, "r1")
    b = pool.allocate(5000, "r1")
    assert a.ptr % 256 == 0 and b.ptr % 256 == 0
    assert a.nbytes == 1024 and b.nbytes == 5120
    arr = a.view((10, 25), np.dtype(np.float32))
    arr[:] = 7
    assert a.view((250,), np.dtype(np.float32)).sum() == 1750
    st = pool.stats()
    assert (st.reserved, st.in_use, st.peak, st.blocks_in_use) == (6144, 6144, 6144, 2)
    pool.release(a)
    st = pool.stats()
    assert (st.reserved, st.in_use, st.peak) == (6144, 5120, 6144)
    assert st.fragmentation == pytest.approx(1024 / 6144)
    # Same size again: the cached block, nothing new from the allocator.
    c = pool.allocate(900, "r2")
    assert c.ptr == a.ptr and pool.stats().reserved == 6144
    # Far bigger than any cached block: new memory.
    pool.release(c)
    d = pool.allocate(100_000, "r2")
    assert d.ptr != a.ptr and pool.stats().reserved == 6144 + d.nbytes
    with pytest.raises(ValueError, match="not in use"):
        pool.release(c)
    pool.release(b)
    pool.release(d)
    assert pool.trim() == 6144 + d.nbytes
    assert pool.stats().reserved == 0


def test_leaks_are_named_by_owner_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    pool = MemoryPool("leaky", "host", -1, HostAllocator())
    kept = pool.allocate(256, "runner-a")
    pool.release(pool.allocate(256, "runner-b"))
    seen = []
    with caplog.at_level(logging.ERROR):
        assert report_leaks("runner-a", seen.append) == 1
    assert seen == [kept]
    assert "runner-a still holds 256 B" in caplog.text and "leaky" in caplog.text
    assert report_leaks("runner-b") == 0
    assert pool in all_pools()


def test_a_view_larger_than_its_block_or_of_device_memory_is_refused() -> None:
    pool = MemoryPool("v", "host", -1, HostAllocator())
    b = pool.allocate(256, "x")
    with pytest.raises(ValueError):
        b.view((65,), np.dtype(np.float32))
    dev = MemoryPool("d", "device", 0, HostAllocator())
    with pytest.raises(TypeError):
        dev.allocate(256, "x").view((1,), np.dtype(np.float32))


def test_host_pool_is_one_per_process() -> None:
    assert host_pool() is host_pool()
