import queue
import threading
import time

from strata.cloud.gather import gather


def test_takes_waiting_items_up_to_the_limit() -> None:
    q: queue.Queue[int] = queue.Queue()
    for i in range(1, 10):
        q.put(i)
    assert gather(q, 0, 4, time.monotonic() + 10) == [0, 1, 2, 3]
    assert q.qsize() == 6


def test_stops_at_the_deadline_and_waits_for_late_items_before_it() -> None:
    q: queue.Queue[int] = queue.Queue()
    start = time.monotonic()
    assert gather(q, 0, 8, start + 0.05) == [0]
    assert 0.04 <= time.monotonic() - start < 1.0
    threading.Timer(0.02, q.put, args=(1,)).start()
    assert gather(q, 0, 2, time.monotonic() + 2.0) == [0, 1]


def test_does_not_wait_once_it_has_what_it_waits_for() -> None:
    q: queue.Queue[int] = queue.Queue()
    q.put(1)
    start = time.monotonic()
    assert gather(q, 0, 8, start + 5.0, wait_for=2) == [0, 1]
    assert time.monotonic() - start < 1.0
    q.put(1)
    q.put(2)
    q.put(3)
    assert gather(q, 0, 8, time.monotonic() + 5.0, wait_for=2) == [0, 1, 2, 3]  # no sleep
