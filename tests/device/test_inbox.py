"""device/filters/inbox.py: bounded per-camera queues, round-robin batches, wait or drop when
full."""

from __future__ import annotations

import threading
import time

import numpy as np
from strata.device.capture.frames import Frame
from strata.device.filters.inbox import GateInbox, GateItem

_PIXELS = np.zeros((4, 4, 3), np.uint8)


def _item(cam: str, i: int) -> GateItem:
    return GateItem(cam, i, i, Frame(i, 0.0, i, bgr=_PIXELS), 1.0, time.monotonic())


def _inbox(per_camera: int, *cams: str) -> GateInbox:
    inbox = GateInbox(per_camera)
    for cam in cams:
        inbox.add_camera(cam)
    return inbox


def test_batches_take_round_robin_so_a_busy_camera_cannot_starve_another() -> None:
    inbox = _inbox(10, "file", "live")
    for i in range(6):
        assert inbox.put(_item("file", i), wait=False) is None
    inbox.put(_item("live", 100), wait=False)
    batch = inbox.take(3, 0.0, 1.0)
    assert [(b.camera_id, b.index) for b in batch] == [("file", 0), ("live", 100), ("file", 1)]
    assert len(inbox) == 4 and inbox.waiting("file") == 4 and inbox.waiting("live") == 0


def test_a_full_live_queue_drops_its_oldest() -> None:
    inbox = _inbox(2, "live")
    assert inbox.put(_item("live", 1), wait=False) is None
    assert inbox.put(_item("live", 2), wait=False) is None
    dropped = inbox.put(_item("live", 3), wait=False)
    assert dropped is not None and dropped.index == 1
    assert [b.index for b in inbox.take(5, 0.0, 1.0)] == [2, 3]


def test_a_full_file_queue_waits_for_room_or_stop() -> None:
    inbox = _inbox(1, "file")
    inbox.put(_item("file", 1), wait=True)
    done: list[GateItem | None] = []
    t = threading.Thread(target=lambda: done.append(inbox.put(_item("file", 2), wait=True)))
    t.start()
    time.sleep(0.2)
    assert not done  # still waiting: nothing was dropped
    assert [b.index for b in inbox.take(1, 0.0, 1.0)] == [1]
    t.join(5.0)
    assert done == [None] and inbox.waiting("file") == 1
    stop = threading.Event()
    stop.set()
    refused = inbox.put(_item("file", 3), wait=True, stop=stop)
    assert refused is not None and refused.index == 3  # handed back, not queued


def test_take_waits_for_the_batch_to_fill_then_gives_up() -> None:
    inbox = _inbox(10, "cam")
    assert inbox.take(4, 0.0, 0.05) == []  # nothing came within the timeout
    inbox.put(_item("cam", 1), wait=False)
    threading.Timer(0.05, lambda: inbox.put(_item("cam", 2), wait=False)).start()
    t0 = time.monotonic()
    batch = inbox.take(4, 0.5, 1.0)
    took = time.monotonic() - t0
    assert [b.index for b in batch] == [1, 2]
    assert 0.4 <= took < 3.0  # waited out max_delay for two more that never came


def test_close_frees_a_waiting_producer() -> None:
    inbox = _inbox(1, "file")
    inbox.put(_item("file", 1), wait=True)
    done: list[GateItem | None] = []
    t = threading.Thread(target=lambda: done.append(inbox.put(_item("file", 2), wait=True)))
    t.start()
    time.sleep(0.1)
    assert not done
    inbox.close()
    t.join(5.0)
    # It stops waiting: the newest frame goes in, the oldest comes back as dropped.
    assert len(done) == 1 and done[0] is not None and done[0].index == 1
    assert [b.index for b in inbox.take(4, 0.0, 1.0)] == [2]


def test_close_wakes_a_waiting_taker_at_once() -> None:
    # A stopping agent's gate worker must not sit out its take timeout (it was 50 ms of
    # every clip's end, a twentieth of vtest's run).
    inbox = _inbox(4, "cam")
    threading.Timer(0.1, inbox.close).start()
    t0 = time.monotonic()
    assert inbox.take(4, 0.0, 30.0) == []
    assert time.monotonic() - t0 < 10.0  # woken by the close, not the 30 s timeout
    assert inbox.closed
    inbox.put(_item("cam", 1), wait=False)  # what is still queued after a close is taken
    assert [b.index for b in inbox.take(4, 0.0, 1.0)] == [1]
