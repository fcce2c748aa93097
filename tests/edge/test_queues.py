"""The per-camera queues: round-robin batches, bounded per camera, released when full or
when the oldest frame has waited the max delay."""

from __future__ import annotations

import threading
import time

import numpy as np
from strata.edge.flow.queues import CameraQueues
from strata.edge.ingest.frames import QueuedFrame
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
