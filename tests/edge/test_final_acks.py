"""Final acks: settled in delivery, journaled, and handed over a real inproc PUSH/PULL
pair (as to the ingest thread); a non-PROCESSED status is counted."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import zmq
from strata.edge.flow.delivery import Delivery, Served
from strata.edge.flow.final_acks import FinalAcks
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.metrics import sample

IMG = np.zeros((2, 2, 3), np.uint8)


class Journal:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str, int, int, str]] = []

    def settled(self, session_id: int, camera_id: str, seq: int, status: int, why: str) -> None:
        self.lines.append((session_id, camera_id, seq, status, why))


def test_a_final_ack_is_settled_journaled_and_sent(zctx: Any) -> None:
    metrics = EdgeMetrics()
    delivery = Delivery(EdgeConfig(), Served(max_batch=4), metrics)
    journal = Journal()
    acks = FinalAcks(delivery, journal, metrics)
    pull, push = zctx.socket(zmq.PULL), zctx.socket(zmq.PUSH)
    pull.bind("inproc://final-acks-test")
    push.connect("inproc://final-acks-test")
    acks.open(push)
    try:
        h = frame_pb2.FrameHeader(camera_id="cam", sequence=5, session_id=7)
        assert delivery.precheck(h) is None
        delivery.admit(h)
        frame = QueuedFrame(h, memoryview(IMG), 0, time.monotonic(), identity=b"agent")
        acks.send(frame, frame_pb2.ACK_STATUS_SHED, "deadline: late")
        assert pull.poll(2000)
        identity, body = pull.recv_multipart()
        ack = frame_pb2.FrameAck.FromString(body)
        assert identity == b"agent" and ack.status == frame_pb2.ACK_STATUS_SHED
        assert ack.reason == "deadline: late"
        assert journal.lines == [(7, "cam", 5, frame_pb2.ACK_STATUS_SHED, "deadline: late")]
        assert sample(metrics.registry, "strata_edge_frames_total", {"status": "shed"}) == 1
        # Its resend is answered with that final status.
        again = delivery.precheck(h)
        assert again is not None and again.status == frame_pb2.ACK_STATUS_SHED
    finally:
        pull.close()
        push.close()
