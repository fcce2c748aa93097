"""Final acks: a taken frame's PROCESSED (after its result was published), SHED or
REJECTED, with delivery settling it, the journal recording it, and the ack handed to
the ingest thread (the ROUTER's owner) through an inproc PUSH socket.

Worker thread only (the PUSH socket is the worker's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import zmq
from strata.edge.flow.delivery import Delivery
from strata.edge.ingest.frames import QueuedFrame
from strata.edge.metrics import EdgeMetrics
from strata.shared.contracts import frame_pb2

log = logging.getLogger(__name__)


class SettleLog(Protocol):
    """Where a settled frame is recorded (the checkpoint's journal)."""

    def settled(self, session_id: int, camera_id: str, seq: int, status: int, why: str) -> None: ...


class FinalAcks:
    """Settles taken frames and sends their final acks."""

    def __init__(self, delivery: Delivery, journal: SettleLog, metrics: EdgeMetrics) -> None:
        self.delivery = delivery
        self.journal = journal
        self.metrics = metrics
        self._out: Any = None
        # What the agent should hear about its camera (tracking's feedback, send_next), put
        # on a PROCESSED ack too: right after a frame's result, not only on the camera's
        # next message's QUEUED ack (a run of dropped frames' notices may be 200 ms away).
        self.decorate: Callable[[frame_pb2.FrameAck, frame_pb2.FrameHeader], None] | None = None

    def open(self, sock: Any) -> None:
        """The worker thread's end of the final-ack pipe (from its start on)."""
        self._out = sock

    def send(
        self,
        frame: QueuedFrame,
        status: int,
        reason: str = "",
        moving_objects: int | None = None,
    ) -> None:
        """Send a taken frame's final ack (it leaves through ingest); `moving_objects`: a
        detected frame's answer for the device's site gate (edge/publish/moving.py)."""
        h = frame.header
        ack = self.delivery.settle(h, status, reason)
        if moving_objects is not None:
            ack.moving_objects = moving_objects
        if status == frame_pb2.ACK_STATUS_PROCESSED and self.decorate is not None:
            self.decorate(ack, h)
        self.journal.settled(h.session_id, h.camera_id, h.sequence, status, reason)
        if status != frame_pb2.ACK_STATUS_PROCESSED:
            self.metrics.frames.labels(frame_pb2.AckStatus.Name(status)[11:].lower()).inc()
        try:
            self._out.send_multipart([frame.identity, ack.SerializeToString()])
        except zmq.Again:
            self.metrics.drops.labels("ack_unsent").inc()
            log.warning(
                "final ack of %s #%d not sent: the ingest thread is gone (the agent resends)",
                h.camera_id,
                h.sequence,
            )
