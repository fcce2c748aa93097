"""The uplink's circuit breaker: trips counted once, no flapping at the p99 limit."""

from __future__ import annotations

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
