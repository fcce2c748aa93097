"""Checking, decoding and acknowledging frames from device agents (ZeroMQ ROUTER side).

Each message is [identity, header, payload]. Whatever is wrong with it turns into a
REJECTED ack with a reason, a counter and a log line; the node never raises on input.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.wire import MalformedMessage, make_ack, unpack_frame

from .frames import QueuedFrame
from .metrics import EdgeMetrics

log = logging.getLogger(__name__)

QUEUED = frame_pb2.ACK_STATUS_QUEUED
DUPLICATE = frame_pb2.ACK_STATUS_DUPLICATE
REJECTED = frame_pb2.ACK_STATUS_REJECTED


@dataclass(frozen=True, slots=True)
class IngestResult:
    """The ack to send back and, when accepted, the frame to queue."""

    ack: frame_pb2.FrameAck
    frame: QueuedFrame | None


def decode_payload(msg_header: frame_pb2.FrameHeader, payload: memoryview) -> np.ndarray:
    """BGR image of a frame: a zero-copy view for raw BGR, cv2.imdecode for JPEG."""
    h, w = msg_header.height, msg_header.width
    if msg_header.encoding == common_pb2.ENCODING_BGR:
        return np.frombuffer(payload, np.uint8).reshape(h, w, 3)
    import cv2

    image = cv2.imdecode(np.frombuffer(payload, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise MalformedMessage("payload", "JPEG payload does not decode", msg_header)
    if image.shape[:2] != (h, w):
        raise MalformedMessage(
            "payload", f"JPEG is {image.shape[1]}x{image.shape[0]}, header says {w}x{h}", msg_header
        )
    return np.asarray(image)


class Ingest:
    """Turns received parts into acks and queued frames; keeps the per-camera last sequence."""

    def __init__(self, metrics: EdgeMetrics, max_payload: int, max_cameras: int = 256) -> None:
        self.metrics = metrics
        self.max_payload = max_payload
        # Bounds the per-camera state (queues, last sequence) a peer can make the node keep.
        self.max_cameras = max_cameras
        self._last_seq: dict[str, int] = {}

    def handle(self, parts: Sequence[Any], identity: Any = None) -> IngestResult:
        """Check one message (without its identity part); never raises."""
        header: frame_pb2.FrameHeader | None = None
        try:
            if len(parts) == 2 and memoryview(parts[1]).nbytes > self.max_payload:
                raise MalformedMessage(
                    "payload", f"payload of {memoryview(parts[1]).nbytes} bytes is over the limit"
                )
            msg = unpack_frame(parts)
            header = msg.header
            cam, seq = header.camera_id, header.sequence
            if cam not in self._last_seq and len(self._last_seq) >= self.max_cameras:
                raise MalformedMessage(
                    "cameras",
                    f"camera {cam!r} would be number {self.max_cameras + 1}; "
                    f"this node serves at most {self.max_cameras} (batching.max_cameras)",
                    header,
                )
            if seq <= self._last_seq.get(cam, 0):
                self.metrics.frames.labels("duplicate").inc()
                return IngestResult(make_ack(cam, seq, DUPLICATE), None)
            image = decode_payload(header, msg.payload)
        except MalformedMessage as exc:
            return self._reject(parts, exc, identity)
        except Exception as exc:  # a decoder bug must not take the node down
            return self._reject(
                parts, MalformedMessage("payload", f"cannot decode: {exc}", header), identity
            )
        self._last_seq[cam] = seq
        self.metrics.frames.labels("accepted").inc()
        frame = QueuedFrame(header, image, time.time_ns(), time.monotonic())
        return IngestResult(make_ack(cam, seq, QUEUED), frame)

    def _reject(self, parts: Sequence[Any], exc: MalformedMessage, identity: Any) -> IngestResult:
        # Name the frame in the ack when the header got far enough to be parsed.
        cam, seq = (exc.header.camera_id, exc.header.sequence) if exc.header else ("", 0)
        self.metrics.frames.labels("rejected").inc()
        self.metrics.rejected.labels(exc.reason).inc()
        log.warning(
            "rejected frame from peer %s camera=%r seq=%d (%s): %s",
            bytes(memoryview(identity)).hex() if identity is not None else "?",
            cam,
            seq,
            exc.reason,
            exc.detail,
        )
        return IngestResult(make_ack(cam, seq, REJECTED, f"{exc.reason}: {exc.detail}"), None)
