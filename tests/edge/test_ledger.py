"""The delivery ledger: pending and settled frames per (sender session, camera)."""

from __future__ import annotations

from strata.edge.flow.ledger import DeliveryLedger, Seen
from strata.shared.contracts import frame_pb2

PROCESSED = frame_pb2.ACK_STATUS_PROCESSED
SHED = frame_pb2.ACK_STATUS_SHED


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_ledger_pending_then_settled_per_session_and_camera() -> None:
    led = DeliveryLedger(settled_per_stream=64)
    key = (1, "cam")
    assert led.lookup(key, 5).seen is Seen.NEW
    led.add(key, 5)
    assert led.lookup(key, 5).seen is Seen.PENDING
    assert led.lookup((2, "cam"), 5).seen is Seen.NEW  # another session: another frame
    led.settle(key, 5, PROCESSED)
    assert led.lookup(key, 5) == led.lookup(key, 5)
    assert led.lookup(key, 5).seen is Seen.SETTLED and led.lookup(key, 5).status == PROCESSED
    led.add(key, 3)  # lower sequences are not duplicates by themselves (BUSY, resend)
    led.settle(key, 3, SHED, "stale")
    assert (led.lookup(key, 3).status, led.lookup(key, 3).reason) == (SHED, "stale")
    led.add(key, 2)
    led.withdraw(key, 2)
    assert led.lookup(key, 2).seen is Seen.NEW


def test_ledger_bounds_settled_records_and_forgets_idle_streams() -> None:
    clock = Clock()
    led = DeliveryLedger(settled_per_stream=64, idle_s=10.0, clock=clock)
    for seq in range(1, 201):
        led.add((1, "a"), seq)
        led.settle((1, "a"), seq, PROCESSED)
    assert led.lookup((1, "a"), 136).seen is Seen.NEW  # beyond the bound: the oldest go
    assert led.lookup((1, "a"), 137).seen is Seen.SETTLED
    led.add((1, "held"), 1)  # pending: never forgotten
    clock.t = 100.0
    led.add((2, "b"), 1)  # a sweep happens on the way
    assert led.is_new_stream((1, "a")) and not led.is_new_stream((1, "held"))


def test_ledger_forgets_the_streams_of_forgotten_cameras_unless_held() -> None:
    led = DeliveryLedger()
    led.add((1, "gone"), 1)
    led.settle((1, "gone"), 1, PROCESSED)
    led.add((1, "held"), 1)
    led.forget_cameras(["gone", "held"])
    assert led.is_new_stream((1, "gone")) and not led.is_new_stream((1, "held"))
