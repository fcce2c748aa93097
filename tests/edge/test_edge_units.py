"""Unit tests of the node's pieces: queues, batch release, breaker, degradation."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from strata.edge.flow.queues import CameraQueues
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.overload.batch_limit import AdaptiveBatchLimit
from strata.edge.uplink.breaker import BreakerState, CircuitBreaker
from strata.shared.contracts import frame_pb2

IMG = np.zeros((2, 2, 3), np.uint8)


def qf(cam: str, seq: int, received: float | None = None) -> QueuedFrame:
    h = frame_pb2.FrameHeader(camera_id=cam, sequence=seq)
    return QueuedFrame(h, memoryview(IMG), 0, time.monotonic() if received is None else received)


def test_round_robin_across_cameras() -> None:
    q = CameraQueues(per_camera=100)
    for i in range(1, 11):
        q.put(qf("busy", i))
    q.put(qf("a", 1))
    q.put(qf("b", 1))
    batch = q.next_batch(4, 0.0, 0.1)
    cams = [f.header.camera_id for f in batch]
    assert set(cams[:3]) == {"busy", "a", "b"}  # one each before the busy one again
    assert len(batch) == 4


def test_full_queue_refuses_and_never_drops_what_it_holds() -> None:
    q = CameraQueues(per_camera=3)
    assert [q.put(qf("c", i)) for i in range(1, 6)] == [True, True, True, False, False]
    assert q.depth("c") == 3
    assert [f.header.sequence for f in q.next_batch(10, 0.0, 0.1)] == [1, 2, 3]


def test_batch_leaves_when_full_without_waiting_for_the_delay() -> None:
    q = CameraQueues(per_camera=10)
    for i in range(1, 5):
        q.put(qf("c", i))
    t0 = time.monotonic()
    assert len(q.next_batch(4, 5.0, 5.0)) == 4
    assert time.monotonic() - t0 < 0.5


def test_partial_batch_leaves_when_oldest_has_waited_max_delay() -> None:
    q = CameraQueues(per_camera=10)
    q.put(qf("c", 1))
    t0 = time.monotonic()
    batch = q.next_batch(8, 0.2, 5.0)
    waited = time.monotonic() - t0
    assert len(batch) == 1
    assert 0.15 <= waited < 1.0


def test_batch_fills_from_frames_arriving_during_the_wait() -> None:
    q = CameraQueues(per_camera=10)
    q.put(qf("a", 1))

    def late() -> None:
        time.sleep(0.05)
        for i in range(2, 5):
            q.put(qf("b", i))

    t = threading.Thread(target=late)
    t.start()
    batch = q.next_batch(4, 2.0, 5.0)
    t.join()
    assert len(batch) == 4


def test_empty_queue_times_out_with_nothing() -> None:
    assert CameraQueues(per_camera=2).next_batch(4, 0.01, 0.05) == []


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_breaker_opens_on_consecutive_failures_and_probes_half_open() -> None:
    clock = Clock()
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
    b = CircuitBreaker(100, p99_limit_s=0.1, window=20, open_s=1.0, clock=Clock(), min_samples=10)
    for _ in range(9):
        b.success(0.5)  # too few samples to judge yet
    assert b.state is BreakerState.CLOSED
    b.success(0.5)
    assert b.state is BreakerState.OPEN
    assert "p99" in b.reason


def test_degradation_halves_then_recovers() -> None:
    d = AdaptiveBatchLimit(max_batch=8, min_batch=2, target_s=0.1, window=2)
    assert d.observe([0.3, 0.3]) == 8  # window not complete
    assert d.observe([0.3]) == 4
    d.observe([0.3])
    assert d.observe([0.3]) == 2
    d.observe([0.3])
    assert d.observe([0.3]) == 2  # never under min_batch
    d.observe([0.01])
    assert d.observe([0.01]) == 4
    off = AdaptiveBatchLimit(8, 1, 0.0, 1)
    assert off.observe([10.0]) == 8
