"""Deadline shedding: frames that would finish past the SLA are shed with a reason."""

from __future__ import annotations

import time

import numpy as np
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.overload.deadline import DeadlineShedder
from strata.shared.config.edge import DeadlineConfig
from strata.shared.contracts import frame_pb2

IMG = np.zeros((2, 2, 3), np.uint8)


def qf(seq: int, waited_s: float) -> QueuedFrame:
    h = frame_pb2.FrameHeader(camera_id="cam", sequence=seq)
    return QueuedFrame(h, memoryview(IMG), 0, time.monotonic() - waited_s)


def test_frames_that_cannot_make_the_sla_are_shed_and_the_rest_kept() -> None:
    shed: list[tuple[int, str]] = []
    s = DeadlineShedder(
        DeadlineConfig(enabled=True), 1.0, lambda f, why: shed.append((f.header.sequence, why))
    )
    s.batch_took(0.5)
    kept = s.keep([qf(1, 0.1), qf(2, 0.7), qf(3, 0.2)])
    assert [f.header.sequence for f in kept] == [1, 3]
    assert [seq for seq, _ in shed] == [2] and shed[0][1].startswith("deadline: waited")


def test_when_every_frame_is_shed_the_next_batch_is_not_judged_by_the_last() -> None:
    shed: list[int] = []
    s = DeadlineShedder(DeadlineConfig(enabled=True), 1.0, lambda f, _: shed.append(1))
    s.batch_took(5.0)  # a slow first batch
    assert s.keep([qf(1, 0.0)]) == [] and s.batch_s == 0.0
    assert len(s.keep([qf(2, 0.0)])) == 1


def test_off_keeps_everything() -> None:
    s = DeadlineShedder(DeadlineConfig(), 0.001, lambda f, _: None)
    s.batch_took(5.0)
    assert len(s.keep([qf(1, 10.0)])) == 1
