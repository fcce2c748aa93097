import pytest
from strata.device.transport.outbox import Outbox, OutboxLimits
from strata.shared.contracts import frame_pb2


def _put(box: Outbox, n: int, size: int = 10) -> list[int]:
    return [box.put(frame_pb2.FrameHeader(camera_id="c"), bytes(size)).sequence for _ in range(n)]


def test_sequences_start_where_told_and_increase() -> None:
    box = Outbox("c", OutboxLimits(window=2, max_frames=10, max_bytes=10_000), first_sequence=100)
    assert _put(box, 3) == [100, 101, 102]


def test_window_bounds_in_flight_and_acks_free_it() -> None:
    box = Outbox("c", OutboxLimits(window=2, max_frames=10, max_bytes=10_000))
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
    box = Outbox("c", OutboxLimits(window=2, max_frames=10, max_bytes=10_000))
    h = frame_pb2.FrameHeader
    assert not box.put(h(), b"x").waited
    assert not box.put(h(), b"x").waited
    assert box.put(h(), b"x").waited


def test_overflow_drops_the_oldest_by_count_and_by_bytes() -> None:
    box = Outbox("c", OutboxLimits(window=1, max_frames=3, max_bytes=10_000))
    results = [box.put(frame_pb2.FrameHeader(), bytes(10)) for _ in range(5)]
    assert [r.overflowed for r in results] == [(), (), (), (1,), (2,)]
    assert box.spooled == 3
    by_bytes = Outbox("c", OutboxLimits(window=1, max_frames=100, max_bytes=25))
    dropped = [by_bytes.put(frame_pb2.FrameHeader(), bytes(10)).overflowed for _ in range(4)]
    assert dropped == [(), (), (1,), (2,)]


def test_unsent_frames_go_back_to_the_front() -> None:
    box = Outbox("c", OutboxLimits(window=4, max_frames=10, max_bytes=10_000))
    _put(box, 2)
    first = box.take(0.0)
    assert first is not None
    box.unsend(first)
    again = box.take(0.0)
    assert again is first and again.sends == 1 and box.inflight == 1


def test_ack_timeout_goes_back_n_in_order() -> None:
    box = Outbox("c", OutboxLimits(window=3, max_frames=10, max_bytes=10_000))
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
        Outbox("c", OutboxLimits(window=0, max_frames=1, max_bytes=1))


def test_queued_frees_nothing_and_restarts_the_ack_timeout() -> None:
    box = Outbox("c", OutboxLimits(window=4, max_frames=10, max_bytes=10_000))
    _put(box, 2)
    a, b = box.take(0.0), box.take(0.0)
    assert a and b
    assert box.queued(1, 2.5) and box.pending == 2
    assert box.expire(3.0, 1.0) == (2, ())  # b had no word for 3 s: both go back
    # ... while a frame the edge keeps saying it holds does not time out.
    box2 = Outbox("c", OutboxLimits(window=4, max_frames=10, max_bytes=10_000))
    _put(box2, 1)
    box2.take(0.0)
    box2.queued(1, 2.5)
    assert box2.expire(3.0, 1.0) == (0, ())


def test_busy_puts_back_in_order_and_holds_off_without_marking_resent() -> None:
    box = Outbox("c", OutboxLimits(window=3, max_frames=10, max_bytes=10_000))
    _put(box, 4)
    items = [box.take(0.0) for _ in range(3)]
    assert [i.header.resent for i in items if i] == [False, False, False]
    assert box.busy(3, 0.0, 0.5) and box.busy(2, 0.0, 0.5)
    assert box.take(0.2) is None  # held off for retry_after
    again = [box.take(0.6) for _ in range(2)]
    assert [i.header.sequence for i in again if i] == [2, 3]
    assert [i.header.resent for i in again if i] == [False, False]  # BUSY: never taken
    assert box.ack(1) and box.ack(2) and box.ack(3) and box.pending == 1


def test_credits_set_the_window_within_the_configured_one() -> None:
    box = Outbox("c", OutboxLimits(window=8, max_frames=20, max_bytes=10_000))
    _put(box, 10)
    box.set_window(2)
    assert [box.take(0.0) is not None for _ in range(3)] == [True, True, False]
    box.set_window(0)  # 0: no grant in this ack, keep the last
    assert box.window == 2
    box.set_window(100)
    assert box.window == 8


def test_a_final_ack_frees_a_frame_waiting_for_its_resend() -> None:
    box = Outbox("c", OutboxLimits(window=2, max_frames=10, max_bytes=10_000))
    _put(box, 2)
    box.take(0.0)
    box.take(0.0)
    assert box.resend_all() == (2, ())
    assert box.ack(1) is not None  # the PROCESSED ack was on its way
    item = box.take(1.0)
    assert item and item.header.sequence == 2 and item.header.resent
    assert box.take(1.0) is None and box.pending == 1


def test_level_three_drop_policy_bounds_what_waits() -> None:
    box = Outbox("c", OutboxLimits(window=2, max_frames=100, max_bytes=100_000))
    _put(box, 10)
    assert box.limit_waiting(3, "oldest") == (1, 2, 3, 4, 5, 6, 7)
    assert box.spooled == 3
    _put(box, 2)
    assert box.limit_waiting(3, "newest") == (12, 11)
    assert [box.take(0.0).header.sequence for _ in range(2)] == [8, 9]  # type: ignore[union-attr]


def test_a_run_of_notices_counts_as_the_frames_it_tells_when_held_and_when_dropped() -> None:
    box = Outbox("c", OutboxLimits(window=1, max_frames=2, max_bytes=10_000))
    run = frame_pb2.FrameHeader(
        kind=frame_pb2.FRAME_KIND_SKIPPED,
        frame_index=3,
        earlier_skipped=[frame_pb2.SkippedFrame(frame_index=i) for i in (0, 1, 2)],
    )
    assert box.put(run, b"").sequence == 1
    box.put(frame_pb2.FrameHeader(frame_index=4), b"x")
    assert box.pending == 2 and box.pending_frames() == 5
    # The spool holds 2 messages: the run overflows, as its 4 frames.
    assert box.put(frame_pb2.FrameHeader(frame_index=5), b"x").overflowed == (1, 1, 1, 1)
    assert box.pending_frames() == 2
