"""The uplink's circuit breaker: trips counted once, no flapping at the p99 limit."""

from __future__ import annotations

import pytest
from strata.edge.uplink.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(clock: Clock, changes: list[tuple[BreakerState, BreakerState]]) -> CircuitBreaker:
    return CircuitBreaker(
        failures=3,
        p99_limit_s=2.0,
        window=100,
        open_s=5.0,
        clock=clock,
        on_change=lambda old, new: changes.append((old, new)),
        close_ratio=0.8,
        min_samples=20,
    )


def trips(changes: list[tuple[BreakerState, BreakerState]]) -> int:
    return sum(1 for old, new in changes if (old, new) == (BreakerState.CLOSED, BreakerState.OPEN))


def test_failed_probes_are_not_trips() -> None:
    clock, changes = Clock(), []
    b = make(clock, changes)
    for _ in range(3):
        b.failure("unreachable")
    assert b.state is BreakerState.OPEN and b.trips == 1
    for _ in range(5):  # the cloud stays down: every probe fails
        clock.t += 5.0
        assert b.allow()
        assert b.state is BreakerState.HALF_OPEN
        b.failure("unreachable", probe=True)
        assert b.state is BreakerState.OPEN
    assert b.trips == 1 and trips(changes) == 1
    clock.t += 5.0
    assert b.allow()
    b.success(0.05, probe=True)
    assert b.state is BreakerState.CLOSED
    assert b.trips == 1


def test_late_acks_of_earlier_requests_do_not_close_it() -> None:
    clock, changes = Clock(), []
    b = make(clock, changes)
    for _ in range(3):
        b.failure("ack timeout")
    for _ in range(10):  # acks of batches sent before it opened
        b.success(0.01)
    assert b.state is BreakerState.OPEN
    clock.t += 5.0
    assert b.allow() and not b.allow()  # one probe at a time
    b.success(0.01)  # still a late ack, not the probe's
    assert b.state is BreakerState.HALF_OPEN
    b.success(0.01, probe=True)
    assert b.state is BreakerState.CLOSED


def test_a_cloud_at_the_limit_does_not_make_it_flap() -> None:
    """The vtest demo: p99 2018 ms against a 2000 ms limit gave 17 open/close pairs."""
    clock, changes = Clock(), []
    b = make(clock, changes)
    latencies = [1.9] * 98 + [2.018, 2.018]  # p99 just over the limit
    step = 0.1
    for i in range(600):  # a minute of acks, 10 a second
        clock.t += step
        if b.state is BreakerState.CLOSED:
            b.success(latencies[i % len(latencies)])
        else:
            b.success(2.018)  # late acks keep arriving while it is open
            if b.allow():  # a probe when due; the cloud answers it at the same pace
                b.success(2.018, probe=True)
    assert b.trips == 1
    closes = [c for c in changes if c[1] is BreakerState.CLOSED]
    assert closes == []  # never closed while the cloud sat at the limit
    # Transitions are paced by open_s (one probe per 5 s), never milliseconds apart.
    assert len(changes) <= 1 + 2 * (60 // 5) + 2
    # The cloud recovers: the next probe closes it, once, and it stays closed.
    clock.t += 5.0
    assert b.allow()
    b.success(0.3, probe=True)
    assert b.state is BreakerState.CLOSED
    for _ in range(200):
        b.success(0.3)
    assert b.state is BreakerState.CLOSED and b.trips == 1


def test_p99_needs_a_full_window_after_closing() -> None:
    clock, changes = Clock(), []
    b = make(clock, changes)
    for _ in range(19):
        b.success(3.0)
    assert b.state is BreakerState.CLOSED  # 19 samples: too few to judge
    b.success(3.0)
    assert b.state is BreakerState.OPEN and "p99" in b.reason


class ZeroClock(Clock):
    """A clock that starts at 0 (the tests below count from there)."""

    def __init__(self) -> None:
        self.t = 0.0


def test_breaker_opens_on_consecutive_failures_and_probes_half_open() -> None:
    clock = ZeroClock()
    states: list[BreakerState] = []
    b = CircuitBreaker(
        3, 1.0, 20, open_s=5.0, clock=clock, on_change=lambda _old, new: states.append(new)
    )
    b.failure("x")
    b.success(0.01)  # resets the run of failures
    b.failure("x")
    b.failure("x")
    assert b.state is BreakerState.CLOSED
    b.failure("x")
    assert b.state is BreakerState.OPEN
    assert not b.allow()
    clock.t = 5.1
    assert b.allow()  # the probe
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow()  # one probe at a time
    b.failure("probe", probe=True)
    assert b.state is BreakerState.OPEN
    assert b.seconds_until_probe() == pytest.approx(5.0)
    clock.t = 10.2
    assert b.allow()
    b.success(0.01, probe=True)
    assert b.state is BreakerState.CLOSED
    assert b.trips == 1  # the failed probe reopened it; that is not a new trip
    assert states == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


def test_breaker_opens_on_p99_latency() -> None:
    b = CircuitBreaker(
        100, p99_limit_s=0.1, window=20, open_s=1.0, clock=ZeroClock(), min_samples=10
    )
    for _ in range(9):
        b.success(0.5)  # too few samples to judge yet
    assert b.state is BreakerState.CLOSED
    b.success(0.5)
    assert b.state is BreakerState.OPEN
    assert "p99" in b.reason
