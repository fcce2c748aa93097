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
    assert ring.acquire() == 0  # wraps, and must wait for slot 0's work
    assert [e.waited for e in events] == [1, 0, 0]
    assert ring.busy() == 2


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
