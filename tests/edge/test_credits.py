"""Credit admission: capacity, shares, the floor, degradation levels."""

from __future__ import annotations

import pytest
from strata.edge.flow.credits import CapacityMeter, CreditGate, NoLimits
from strata.shared.config.edge import FlowConfig


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_capacity_is_frames_per_busy_second() -> None:
    m = CapacityMeter(window_s=0.5)
    m.add(10, 0.25)
    assert m.fps == 0
    m.add(10, 0.25)
    assert m.fps == 40.0


def test_credits_follow_capacity_and_delay_target_split_over_active_cameras() -> None:
    clock = Clock()
    cfg = FlowConfig(initial_credits=3, batches_in_node=0, credit_headroom=0.4)
    gate = CreditGate(cfg, 0.2, max_batch=4, max_per_camera=64, clock=clock)
    assert gate.credits("a") == 3  # not measured yet
    gate.observe_batch(100, 1.0, [0.01])  # 100 frames/s
    # The batch in service plus 100/s x 0.2 s x 0.4 queued (a queue delay of 80 ms).
    assert gate.total_credits == 4 + 8
    for cam in ("a", "b", "c"):
        assert gate.try_admit(cam) is not None
    clock.t = 1.0  # a period passes: three cameras active
    gate.has_room("a")
    assert gate.active_cameras == 3 and gate.credits("a") == 4  # 12 / 3
    taken = 1
    while gate.has_room("a"):
        assert gate.try_admit("a") is not None
        taken += 1
    assert taken == 4  # the camera's share, and no more
    busy = gate.busy("a")
    assert busy.credits == 4 and 5 <= busy.retry_after_ms <= 200
    gate.release("a")
    assert gate.has_room("a")


def test_shares_round_down_so_cameras_never_hold_more_than_the_total() -> None:
    cfg = FlowConfig(batches_in_node=0, credit_headroom=0.4)
    gate = CreditGate(cfg, 0.2, max_batch=4, max_per_camera=64, clock=Clock())
    gate.observe_batch(125, 1.0, [0.01])  # 4 + 10 = 14 over 3 cameras
    for cam in ("a", "b", "c"):
        gate.has_room(cam)
    assert gate.total_credits == 14 and gate.credits("a") == 4  # not 5: 15 > 14


def test_credits_never_fall_below_a_batch_in_service_and_one_queued() -> None:
    # A slow node: Little's law alone would grant 4 + 10/s x 0.2 s x 0.4 = 5 frames, so a
    # batch of 4 leaves while its successor has one frame (the rest still on the way).
    limit = [4]

    class Limits(NoLimits):
        def batch_limit(self) -> int:
            return limit[0]

    gate = CreditGate(FlowConfig(), 0.2, 4, 64, Clock(), Limits(4))
    gate.observe_batch(10, 1.0, [0.01])
    for cam in ("a", "b", "c"):
        gate.has_room(cam)
    assert gate.total_credits == 8  # two batches of 4
    assert gate.credits("a") == 3  # 8 / 3 rounded up: together at least the floor
    limit[0] = 2  # the batch rule halved the batch: the floor follows
    assert gate.total_credits == 4 and gate.credits("a") == 2
    off = CreditGate(FlowConfig(batches_in_node=0), 0.2, 4, 64, clock=Clock())
    off.observe_batch(10, 1.0, [0.01])
    assert off.total_credits == 5


def test_new_cameras_share_the_credits_from_their_first_frame() -> None:
    clock = Clock()
    cfg = FlowConfig(batches_in_node=0, credit_headroom=0.4, period_s=0.5)
    gate = CreditGate(cfg, 0.2, max_batch=4, max_per_camera=64, clock=clock)
    gate.observe_batch(100, 1.0, [0.01])
    assert gate.try_admit("a") is not None  # alone: the whole total (12)
    assert gate.credits("a") == 12
    clock.t = 0.1  # within the same period, two more cameras start
    assert gate.try_admit("b") is not None and gate.try_admit("c") is not None
    assert gate.active_cameras == 3 and gate.credits("b") == 4


def test_a_saturating_camera_degrades_step_by_step_and_recovers_slowly() -> None:
    clock = Clock()
    cfg = FlowConfig(period_s=0.5, up_s=1.0, down_s=3.0, initial_credits=2)
    gate = CreditGate(cfg, 0.1, max_batch=1, max_per_camera=64, clock=clock)
    gate.observe_batch(10, 1.0, [0.2])  # queue delay twice the target: loaded
    levels = []
    for _ in range(12):  # 6 s of a camera always over its credit
        clock.t += 0.5
        while gate.has_room("hot"):
            gate.try_admit("hot")
        levels.append(gate.level("hot"))
    assert levels[-1] == 3 and levels == sorted(levels)
    assert levels.index(1) >= 1  # one step per up_s, not all at once
    for _ in range(64):  # the node empties: calm
        gate.release("hot")
    for _ in range(14):  # 7 s: pressure decays below the mark, then 3 s calm per step
        clock.t += 0.5
        gate.decay_delay()
        gate.has_room("hot")
    assert 0 < gate.level("hot") < 3  # hysteresis: one step per down_s


def test_loaded_is_pressure_at_the_configured_level() -> None:
    gate = CreditGate(FlowConfig(loaded_pressure=0.5), 0.2, 4, 64, clock=Clock())
    assert not gate.loaded
    gate.observe_batch(4, 0.05, [0.09])  # queue delay 0.45 of the 0.2 s target
    assert not gate.loaded
    gate.observe_batch(4, 0.05, [0.2])  # smoothed: 0.8 x 0.09 + 0.2 x 0.2 = 0.112 s
    assert gate.loaded and gate.pressure == pytest.approx(0.56)
