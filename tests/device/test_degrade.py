"""Degradation at the source: the levels the edge asks for, applied cheapest first."""

from __future__ import annotations

from strata.device.transport.degrade import SourceDegrader
from strata.shared.config.device import DegradeConfig


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_camera_degrades_only_as_far_as_its_backlog_needs_and_the_edge_allows() -> None:
    clock = Clock()
    d = SourceDegrader(DegradeConfig(up_s=1.0, down_s=3.0), clock)
    d.set_level(3)
    d.observe_backlog(0, 4)
    assert d.level == 0  # the edge allows 3, but nothing waits: within its share
    for _ in range(25):  # 2.5 s with more than a window waiting: two steps up
        clock.t += 0.1
        d.observe_backlog(10, 4)
    assert d.level == 2
    d.set_level(1)
    assert d.level == 1  # never beyond what the edge asks
    d.set_level(3)
    for _ in range(50):  # 5 s with nothing waiting: one step down per 3 s
        clock.t += 0.1
        d.observe_backlog(0, 4)
    assert d.level == 1


def _at(d: SourceDegrader, clock: Clock, level: int) -> None:
    d.set_level(level)
    d.need = level
    d.observe_backlog(9, 4)  # frames waiting beyond the window: the level applies


def test_levels_raise_motion_then_cap_rate_then_bound_waiting() -> None:
    clock = Clock()
    d = SourceDegrader(DegradeConfig(motion_factor=2.0, rate_headroom=1.25, min_fps=1), clock)
    assert d.motion_threshold(10) == 10 and d.rate_cap() == float("inf")
    assert d.waiting_limit(4) is None
    _at(d, clock, 1)
    assert d.motion_threshold(10) == 20 and d.rate_cap() == float("inf")
    for _ in range(8):  # the edge finishes 8 frames/s of this camera
        d.rate.add()
    clock.t = 1.0
    d.rate.tick()
    _at(d, clock, 2)
    assert d.rate_cap() == 10.0
    kept = 0
    for i in range(100):  # 100 frames offered over one second
        clock.t = 1.0 + i / 100
        kept += d.keep_by_rate()
    assert 9 <= kept <= 15  # the cap, plus at most half a second of burst
    _at(d, clock, 3)
    assert d.waiting_limit(4) == 4
    d.observe_backlog(0, 4)  # nothing waiting: even at level 3 nothing is dropped
    assert d.motion_threshold(10) == 10 and d.rate_cap() == float("inf")
    _at(d, clock, 0)
    assert d.motion_threshold(10) == 10 and d.keep_by_rate()


def test_disabled_degradation_ignores_the_edge() -> None:
    d = SourceDegrader(DegradeConfig(enabled=False))
    d.set_level(3)
    assert d.level == 0 and d.waiting_limit(4) is None
