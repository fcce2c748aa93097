import numpy as np
import pytest
from strata.shared.runtime import ModelLoadError, TensorSpec
from strata.shared.runtime.staging import (
    ALIGNMENT,
    Profile,
    SlotRing,
    plan_buffers,
    select_profile,
)

F32 = np.dtype(np.float32)


def test_buffer_plan_sizes_every_slot_for_max_batch() -> None:
    ins = (TensorSpec("images", (None, 3, 640, 640), F32),)
    outs = (TensorSpec("output0", (None, 84, 8400), F32),)
    plan = plan_buffers(ins, outs, max_batch=8, slots=4)
    assert plan.inputs[0].shape == (8, 3, 640, 640)
    assert plan.inputs[0].nbytes == 8 * 3 * 640 * 640 * 4
    assert plan.outputs[0].shape == (8, 84, 8400)
    assert all(t.aligned % ALIGNMENT == 0 for t in (*plan.inputs, *plan.outputs))
    assert plan.total_bytes == 4 * plan.slot_bytes
    fp16 = plan_buffers(ins, outs, 8, 1, dtype=np.dtype(np.float16))
    assert fp16.inputs[0].nbytes == plan.inputs[0].nbytes // 2


def test_buffer_plan_needs_sizes_for_dynamic_axes() -> None:
    ins = (TensorSpec("images", (None, 3, None, None), F32),)
    outs = (TensorSpec("out", (None, 84, None), F32),)
    with pytest.raises(ModelLoadError, match="dynamic axis"):
        plan_buffers(ins, outs, 2, 1)
    plan = plan_buffers(ins, outs, 2, 1, (0, 3, 320, 320), [(0, 84, 2100)])
    assert plan.inputs[0].shape == (2, 3, 320, 320)
    assert plan.outputs[0].shape == (2, 84, 2100)


class FakeEvent:
    def __init__(self) -> None:
        self.done = False
        self.waited = 0

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True


def test_slot_ring_round_robin_waits_only_for_the_reused_slot() -> None:
    ring = SlotRing(3)
    events = []
    for expected in (0, 1, 2):
        slot = ring.acquire()
        assert slot == expected
        ev = FakeEvent()
        ring.launched(slot, ev)
        events.append(ev)
    assert ring.busy() == 3
    ring.read(0)
    assert ring.acquire() == 0  # wraps, and must wait for slot 0's work
    assert [e.waited for e in events] == [1, 0, 0]
    assert ring.busy() == 2


def test_slot_ring_never_hands_out_a_slot_whose_results_are_unread() -> None:
    """A batch launched between a pipeline's (a codec probe's) takes the free slot, and the
    pipeline's next launch skips the slot still holding its unread batch."""
    ring = SlotRing(2)
    a, b = ring.acquire(), ring.acquire()
    ring.launched(a, FakeEvent())
    ring.launched(b, FakeEvent())
    ring.read(a)  # the pipeline finished its oldest batch
    probe = ring.acquire()
    assert probe == a
    ring.launched(probe, None)
    ring.read(probe)
    assert ring.acquire() == a  # not b: its results are not read yet
    ring.launched(a, None)
    with pytest.raises(RuntimeError, match="not yet read"):
        ring.acquire()


def test_a_batch_between_a_pipelines_batches_leaves_their_results_alone() -> None:
    """The edge worker's pattern on a real model with two slots: batches A and B in flight,
    A read, a probe's batch run and read, C launched: B still reads B's outputs."""
    from pathlib import Path

    from strata.shared.runtime import create_runner
    from strata.shared.runtime.staging import HostStagedRunner

    model = Path(__file__).resolve().parents[2] / "shared/starter_models/picodet_s_416/model.onnx"
    staged = HostStagedRunner(create_runner(model, "onnxruntime-cpu"), 1, (3, 416, 416), slots=2)
    rng = np.random.default_rng(0)
    images = {k: rng.random((1, 3, 416, 416), np.float32) for k in "ABPC"}

    def launch(k: str) -> int:
        slot = staged.acquire()
        staged.host_input(slot)[:1] = images[k]
        staged.launch(slot, 1)
        return slot

    a, b = launch("A"), launch("B")
    staged.wait(a, 1)
    staged.wait(launch("P"), 1)
    launch("C")
    got = [o.copy() for o in staged.wait(b, 1)]
    want = staged.runner.run(images["B"])
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    staged.close()


def test_profile_selection_picks_the_tightest_fitting_profile() -> None:
    profiles = [Profile(1, 4, 8), Profile(1, 1, 1), Profile(8, 16, 32)]
    assert select_profile(profiles, 1) == 1
    assert select_profile(profiles, 4) == 0
    assert select_profile(profiles, 8) == 0
    assert select_profile(profiles, 20) == 2
    with pytest.raises(ValueError, match="outside"):
        select_profile(profiles, 64)
    assert Profile(1, 4, 8).shapes((3, 640, 640)) == (
        (1, 3, 640, 640),
        (4, 3, 640, 640),
        (8, 3, 640, 640),
    )


class _BarrierRunner:
    """A stand-in model whose run returns only once `parties` runs are inside it at once."""

    backend = "stand-in"

    def __init__(self, parties: int, fail_on: float | None = None) -> None:
        import threading

        self.inputs = (TensorSpec("x", (None, 1, 2, 2), np.dtype(np.float32)),)
        self.outputs = (TensorSpec("y", (None, 1), np.dtype(np.float32)),)
        self.barrier = threading.Barrier(parties, timeout=5)
        self.fail_on = fail_on

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        if self.fail_on is not None and batch[0, 0, 0, 0] == self.fail_on:
            raise RuntimeError("bad batch")
        self.barrier.wait()
        return [batch.reshape(len(batch), -1)[:, :1].copy()]

    def close(self) -> None:
        pass


def test_host_slots_run_side_by_side_and_each_reads_its_own_batch() -> None:
    from strata.shared.runtime.staging import HostStagedRunner

    # The barrier lets a run return only while the other is running too: with launches
    # run one after the other on the caller's thread, the first would wait out its timeout.
    staged = HostStagedRunner(_BarrierRunner(2), 2, (1, 2, 2), slots=2)  # type: ignore[arg-type]
    slots = []
    for value in (1.0, 2.0):
        slot = staged.acquire()
        staged.host_input(slot)[:2] = value
        staged.launch(slot, 2)
        slots.append(slot)
    assert slots == [0, 1]
    assert staged.wait(slots[0], 2)[0].ravel().tolist() == [1.0, 1.0]
    assert staged.wait(slots[1], 2)[0].ravel().tolist() == [2.0, 2.0]
    staged.close()


def test_a_host_run_that_fails_raises_at_wait_and_frees_its_slot() -> None:
    from strata.shared.runtime.staging import HostStagedRunner

    staged = HostStagedRunner(_BarrierRunner(1, fail_on=7.0), 1, (1, 2, 2), slots=2)  # type: ignore[arg-type]
    slot = staged.acquire()
    staged.host_input(slot)[:1] = 7.0
    staged.launch(slot, 1)
    with pytest.raises(RuntimeError, match="bad batch"):
        staged.wait(slot, 1)
    for _ in range(2):  # both slots free again
        s = staged.acquire()
        staged.host_input(s)[:1] = 3.0
        staged.launch(s, 1)
        assert staged.wait(s, 1)[0].ravel().tolist() == [3.0]
    staged.close()
