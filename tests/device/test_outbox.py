import pytest
from strata.device.outbox import Outbox
from strata.shared.contracts import frame_pb2


def _put(box: Outbox, n: int, size: int = 10) -> list[int]:
    return [box.put(frame_pb2.FrameHeader(camera_id="c"), bytes(size)).sequence for _ in range(n)]


def test_sequences_start_where_told_and_increase() -> None:
    box = Outbox("c", window=2, max_frames=10, max_bytes=10_000, first_sequence=100)
    assert _put(box, 3) == [100, 101, 102]


def test_window_bounds_in_flight_and_acks_free_it() -> None:
    box = Outbox("c", window=2, max_frames=10, max_bytes=10_000)
    _put(box, 4)
    a, b = box.take(0.0), box.take(0.0)
    assert a and b and (a.header.sequence, b.header.sequence) == (1, 2)
    assert box.take(0.0) is None and box.inflight == 2 and box.spooled == 2
    assert box.ack(1) is a
    assert box.ack(1) is None  # a duplicate ack frees nothing
    c = box.take(0.0)
    assert c and c.header.sequence == 3
    assert box.pending == 3


def test_put_reports_waiting_once_the_window_is_taken() -> None:
    box = Outbox("c", window=2, max_frames=10, max_bytes=10_000)
    h = frame_pb2.FrameHeader
    assert not box.put(h(), b"x").waited
    assert not box.put(h(), b"x").waited
    assert box.put(h(), b"x").waited


def test_overflow_drops_the_oldest_by_count_and_by_bytes() -> None:
    box = Outbox("c", window=1, max_frames=3, max_bytes=10_000)
    results = [box.put(frame_pb2.FrameHeader(), bytes(10)) for _ in range(5)]
    assert [r.overflowed for r in results] == [(), (), (), (1,), (2,)]
    assert box.spooled == 3
    by_bytes = Outbox("c", window=1, max_frames=100, max_bytes=25)
    dropped = [by_bytes.put(frame_pb2.FrameHeader(), bytes(10)).overflowed for _ in range(4)]
    assert dropped == [(), (), (1,), (2,)]


def test_unsent_frames_go_back_to_the_front() -> None:
    box = Outbox("c", window=4, max_frames=10, max_bytes=10_000)
    _put(box, 2)
    first = box.take(0.0)
    assert first is not None
    box.unsend(first)
    again = box.take(0.0)
    assert again is first and again.sends == 1 and box.inflight == 1


def test_ack_timeout_goes_back_n_in_order() -> None:
    box = Outbox("c", window=3, max_frames=10, max_bytes=10_000)
    _put(box, 5)
    sent = [box.take(1.0) for _ in range(3)]
    assert [s.header.sequence for s in sent if s] == [1, 2, 3]
    box.ack(2)  # acked out of order; 1 and 3 stay in flight
    assert box.expire(1.5, timeout=1.0) == (0, ())
    back, dropped = box.expire(2.5, timeout=1.0)
    assert back == 2 and dropped == ()
    order = []
    while (item := box.take(3.0)) is not None:
        order.append((item.header.sequence, item.sends))
        box.ack(item.header.sequence)
    assert order == [(1, 2), (3, 2), (4, 1), (5, 1)]
    assert box.pending == 0


def test_bad_bounds_are_rejected() -> None:
    with pytest.raises(ValueError):
        Outbox("c", window=0, max_frames=1, max_bytes=1)
