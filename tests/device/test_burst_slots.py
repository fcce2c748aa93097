"""Calibration bursts a few cameras at a time: the slots' invariant."""

from __future__ import annotations

import os

from strata.device.filters.burst_slots import BurstSlots


def test_at_most_limit_cameras_hold_a_slot_and_only_a_holder_gives_one_back() -> None:
    slots = BurstSlots(2)
    assert slots.take("a") and slots.take("b")
    assert not slots.take("c")
    assert slots.take("a")  # held already: still its own, not a second one
    slots.give_back("c")  # held none: changes nothing
    assert not slots.take("c")
    slots.give_back("a")
    assert slots.take("c") and slots.holders() == {"b", "c"}


def test_no_limit_given_is_one_slot_per_core() -> None:
    slots = BurstSlots(0)
    assert slots.limit == max(1, os.cpu_count() or 1)
    cams = [f"cam{i}" for i in range(slots.limit + 1)]
    assert [slots.take(c) for c in cams] == [True] * slots.limit + [False]
