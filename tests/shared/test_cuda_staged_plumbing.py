"""CudaStagedRunner's copy plumbing on the CPU: a host-memory stand-in for the CUDA calls
(tests/cuda_host_testkit.py); the GPU tests run the real one."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from cuda_host_testkit import HostCuda
from strata.shared.runtime import TensorSpec
from strata.shared.runtime.cuda import DeviceBinding
from strata.shared.runtime.cuda_staged import CudaStagedRunner, Slot
from strata.shared.runtime.pool import Block, report_leaks
from strata.shared.runtime.staging import plan_buffers

F32 = np.dtype(np.float32)


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

    def _close_backend(self) -> None:
        self.cuda.log.append("close backend")  # type: ignore[attr-defined]


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
        cuda.log = [e for e in cuda.log if not e.startswith("bind")]
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


def _doubler(cuda: HostCuda, max_batch: int = 4, slots: int = 2) -> Doubler:
    plan = plan_buffers(
        [TensorSpec("x", (None, 2, 3), F32)], [TensorSpec("y", (None, 1), F32)], max_batch, slots
    )
    return Doubler(cuda, plan)  # type: ignore[arg-type]


def test_a_launch_from_another_thread_binds_that_thread_to_the_device() -> None:
    cuda = HostCuda()
    r = _doubler(cuda)
    try:
        main = threading.current_thread().name

        def work() -> None:
            slot = r.acquire()
            r.host_input(slot)[:1] = 1
            r.launch(slot, 1)
            r.wait(slot, 1)

        t = threading.Thread(target=work, name="edge-worker")
        t.start()
        t.join()
        binds = [e for e in cuda.log if e.startswith("bind")]
        assert binds == [f"bind {main}", "bind edge-worker"]
        # And before its first copy in that thread.
        assert cuda.log.index("bind edge-worker") < cuda.log.index("h2d 24 on 1")
    finally:
        r.close()


def test_device_binding_sets_the_device_once_per_thread() -> None:
    calls: list[tuple[str, int]] = []
    b = DeviceBinding(3, lambda d: calls.append((threading.current_thread().name, d)))
    b.ensure()
    b.ensure()
    t = threading.Thread(target=b.ensure, name="other")
    t.start()
    t.join()
    assert calls == [(threading.current_thread().name, 3), ("other", 3)]


def test_close_releases_the_backend_before_streams_and_buffers() -> None:
    cuda = HostCuda()
    r = _doubler(cuda)
    slot = r.acquire()
    r.launch(slot, 2)
    cuda.log.clear()
    r.close()
    assert cuda.log[:2] == ["sync", "sync"]
    assert cuda.log[2] == "close backend"
    first_stream = cuda.log.index("destroy stream 1")
    first_release = cuda.log.index("release")
    assert 2 < first_stream < first_release
    assert cuda.log.count("release") == 2 * 4  # per slot: host in/out, device in/out
    r.close()  # idempotent


def test_run_takes_batches_larger_than_max_batch_in_chunks() -> None:
    cuda = HostCuda()
    r = _doubler(cuda, max_batch=4)
    try:
        x = np.arange(10 * 6, dtype=np.float32).reshape(10, 2, 3)
        out = r.run(x)[0]
        assert out.shape == (10, 1)
        np.testing.assert_allclose(out[:, 0], 2 * x.reshape(10, -1).sum(axis=1))
    finally:
        r.close()


def test_buffers_come_from_the_pools_and_are_returned_at_close() -> None:
    cuda = HostCuda()
    r = _doubler(cuda)
    owner = r.pool_owner
    assert report_leaks(owner) == 8  # still open: every buffer is outstanding
    reserved = cuda.pinned_pool.stats().reserved
    r.close()
    assert report_leaks(owner) == 0
    st = cuda.pinned_pool.stats()
    assert st.in_use == 0 and st.reserved == reserved and st.blocks_cached == 4
    # A second runner of the same shapes reuses the cached blocks: nothing new reserved.
    r2 = _doubler(cuda)
    assert cuda.pinned_pool.stats().reserved == reserved
    r2.close()


def test_a_runner_built_without_buffers_holds_none_until_allocate() -> None:
    cuda = HostCuda()
    plan = plan_buffers(
        [TensorSpec("x", (None, 2, 3), F32)], [TensorSpec("y", (None, 1), F32)], 4, 2
    )
    r = Doubler(cuda, plan, allocate=False)  # type: ignore[arg-type]
    try:
        assert not r.allocated and r.io_bytes() == 0
        assert cuda.memory_used() == 0 and cuda.streams == 0
        assert report_leaks(r.pool_owner) == 0  # no block handed out at all
        with pytest.raises(RuntimeError, match="no batch buffers"):
            r.acquire()
        r.allocate()
        assert r.allocated and cuda.streams == 2
        # Per slot: pinned in + out and device in + out, each aligned.
        assert r.io_bytes() == 2 * plan.total_bytes == cuda.memory_used()
        r.allocate()  # a second call allocates nothing
        assert r.io_bytes() == 2 * plan.total_bytes and cuda.streams == 2
        x = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
        cold = _doubler(HostCuda())
        try:
            np.testing.assert_array_equal(r.run(x)[0], cold.run(x)[0])
        finally:
            cold.close()
    finally:
        r.close()
    assert report_leaks(r.pool_owner) == 0


def test_a_runner_never_allocated_closes_its_backend_and_streams_it_was_given() -> None:
    cuda = HostCuda()
    plan = plan_buffers(
        [TensorSpec("x", (None, 2, 3), F32)], [TensorSpec("y", (None, 1), F32)], 4, 2
    )
    r = Doubler(cuda, plan, allocate=False, streams=[7, 8])  # type: ignore[arg-type]
    r.close()
    assert cuda.log == ["bind MainThread", "close backend", "destroy stream 7", "destroy stream 8"]
    with pytest.raises(RuntimeError, match="closed"):
        r.allocate()


def test_a_failed_allocation_gives_back_what_it_took() -> None:
    cuda = HostCuda()
    plan = plan_buffers(
        [TensorSpec("x", (None, 2, 3), F32)], [TensorSpec("y", (None, 1), F32)], 4, 2
    )
    r = Doubler(cuda, plan, allocate=False)  # type: ignore[arg-type]
    real = cuda.malloc
    calls = 0

    def malloc_fails_on_the_third(nbytes: int, owner: str) -> Block:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise MemoryError("out of device memory")
        return real(nbytes, owner)

    cuda.malloc = malloc_fails_on_the_third  # type: ignore[method-assign]
    with pytest.raises(MemoryError):
        r.allocate()
    assert not r.allocated and cuda.memory_used() == 0
    assert report_leaks(r.pool_owner) == 0
    cuda.malloc = real  # type: ignore[method-assign]
    r.allocate()  # and it can try again
    assert r.io_bytes() == 2 * plan.total_bytes
    r.close()
