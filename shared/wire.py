"""Frame framing on ZeroMQ: [FrameHeader bytes, payload bytes], the payload never in a protobuf.

The device agent's DEALER sends `pack_frame(header, payload)`; the edge node's ROUTER gets
[identity, header, payload] and checks the last two with `unpack_frame`, which raises
`MalformedMessage` with a short reason code (a metric label) and a sentence for the log.
The ROUTER answers each frame with `pack_ack(...)` behind the identity; the DEALER reads it
with `unpack_ack`.

Sequence numbers are per (sender session, camera) and strictly increasing; the edge
recognises a frame it has seen by (session_id, camera_id, sequence). An agent draws a random
session at start (`new_session_id`) and starts its sequences at its start time in
microseconds (see strata.device), so a restarted agent is never mistaken for a replay of the
previous run, and a bogus sequence only concerns its own session. An ack is final (the
agent may free the frame) only with a status in FINAL_STATUSES; QUEUED and BUSY free nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from .contracts import PROTOCOL_MAJOR, common_pb2, current_version, frame_pb2

# Reason codes (metric label values); the message text carries the detail.
REASON_PARTS = "parts"
REASON_HEADER = "header"
REASON_VERSION = "version"
REASON_FIELDS = "fields"
REASON_PAYLOAD = "payload"
REASONS = (REASON_PARTS, REASON_HEADER, REASON_VERSION, REASON_FIELDS, REASON_PAYLOAD)


class MalformedMessage(ValueError):  # noqa: N818 (the brief names it so)
    """A message that cannot be a frame (or an ack); `reason` is one of REASONS.

    `header` is the parsed header when the fault is past parsing, so a receiver can still
    answer with a REJECTED ack naming the camera and sequence.
    """

    def __init__(
        self, reason: str, detail: str = "", header: frame_pb2.FrameHeader | None = None
    ) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason
        self.header = header


@dataclass(frozen=True, slots=True)
class FrameMessage:
    """A checked frame: its header and a zero-copy view of the payload part."""

    header: frame_pb2.FrameHeader
    payload: memoryview


def pack_frame(header: frame_pb2.FrameHeader, payload: Any) -> list[Any]:
    """Parts to send with `send_multipart(..., copy=False)`; fills payload_size and version.

    `payload` is anything with the buffer protocol (bytes, numpy array, zmq.Frame); it is
    not copied here.
    """
    size = memoryview(payload).nbytes
    header.payload_size = size
    if not header.HasField("version"):
        header.version.CopyFrom(current_version())
    return [header.SerializeToString(), payload]


_M = TypeVar("_M", frame_pb2.FrameHeader, frame_pb2.FrameAck)


def _parse(message: _M, part: Any, what: str) -> _M:
    try:
        message.ParseFromString(bytes(memoryview(part)))
    except (DecodeError, RuntimeWarning) as exc:
        raise MalformedMessage(REASON_HEADER, f"{what}: {exc}") from None
    return message


def _check_version(
    version: common_pb2.ProtocolVersion, me: str, header: frame_pb2.FrameHeader | None = None
) -> None:
    if version.major != PROTOCOL_MAJOR:
        raise MalformedMessage(
            REASON_VERSION,
            f"unsupported protocol version {version.major}.{version.minor}; "
            f"this {me} speaks {PROTOCOL_MAJOR}.x",
            header,
        )


def unpack_frame(parts: Sequence[Any]) -> FrameMessage:
    """Check a received [header, payload] pair; raise MalformedMessage saying what is wrong."""
    if len(parts) != 2:
        raise MalformedMessage(
            REASON_PARTS, f"expected 2 parts (header, payload), got {len(parts)}"
        )
    header = _parse(frame_pb2.FrameHeader(), parts[0], "header is not a FrameHeader")
    _check_version(header.version, "node", header)
    if not header.camera_id:
        raise MalformedMessage(REASON_FIELDS, "camera_id is empty", header)
    if "\0" in header.camera_id:  # it ends the PUB topic (detections_topic)
        raise MalformedMessage(REASON_FIELDS, "camera_id contains a NUL byte", header)
    if header.sequence < 1:
        raise MalformedMessage(REASON_FIELDS, "sequence must start at 1", header)
    if header.width == 0 or header.height == 0:
        raise MalformedMessage(
            REASON_FIELDS, f"bad frame size {header.width}x{header.height}", header
        )
    payload = memoryview(parts[1]).cast("B")
    if header.kind in (frame_pb2.FRAME_KIND_SKIPPED, frame_pb2.FRAME_KIND_HEARTBEAT):
        # Header only: a dropped frame's notice (answered from tracking) or a heartbeat.
        if payload.nbytes or header.payload_size:
            raise MalformedMessage(
                REASON_PAYLOAD,
                f"a {frame_pb2.FrameKind.Name(header.kind)} message carries no payload, "
                f"got {payload.nbytes} bytes",
                header,
            )
        return FrameMessage(header, payload)
    if header.kind not in (frame_pb2.FRAME_KIND_UNSPECIFIED, frame_pb2.FRAME_KIND_FRAME):
        raise MalformedMessage(REASON_FIELDS, f"unknown frame kind {header.kind}", header)
    if payload.nbytes != header.payload_size:
        raise MalformedMessage(
            REASON_PAYLOAD,
            f"payload is {payload.nbytes} bytes, header says {header.payload_size}",
            header,
        )
    if header.encoding == common_pb2.ENCODING_BGR:
        want = header.width * header.height * 3
        if payload.nbytes != want:
            raise MalformedMessage(
                REASON_PAYLOAD,
                f"BGR payload of {header.width}x{header.height} needs {want} bytes, "
                f"got {payload.nbytes}",
                header,
            )
    elif header.encoding not in (common_pb2.ENCODING_JPEG, common_pb2.ENCODING_H264):
        raise MalformedMessage(REASON_FIELDS, f"unknown encoding {header.encoding}", header)
    return FrameMessage(header, payload)


def unfold_run(header: frame_pb2.FrameHeader) -> list[frame_pb2.FrameHeader]:
    """The earlier frames a run of dropped frames' notices tells (`earlier_skipped`), each as
    the SKIPPED header it stands for: `header` with the frame's index, capture time, motion
    score and reason in place of its own. Empty for a header that tells no run."""
    if not header.earlier_skipped:
        return []
    base = frame_pb2.FrameHeader()
    base.CopyFrom(header)
    del base.earlier_skipped[:]
    out = []
    for s in header.earlier_skipped:
        h = frame_pb2.FrameHeader()
        h.CopyFrom(base)
        h.frame_index, h.capture_ns = s.frame_index, s.capture_ns
        h.motion_score, h.skip_reason = s.motion_score, s.skip_reason
        out.append(h)
    return out


def heartbeat_of(parts: Sequence[Any]) -> frame_pb2.FrameHeader | None:
    """The header of a [header, empty payload] heartbeat, else None (a frame, or anything
    malformed: `unpack_frame` then says what is wrong)."""
    if len(parts) != 2 or memoryview(parts[1]).nbytes:
        return None
    try:
        header = _parse(frame_pb2.FrameHeader(), parts[0], "header is not a FrameHeader")
        _check_version(header.version, "node", header)
    except MalformedMessage:
        return None
    return header if header.kind == frame_pb2.FRAME_KIND_HEARTBEAT else None


def new_session_id() -> int:
    """A sender session: random, non-zero, 64 bits (drawn once per agent start)."""
    return secrets.randbits(64) or 1


# Statuses that settle a frame: the agent frees it on one of these and on nothing else.
FINAL_STATUSES = frozenset(
    {
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
        frame_pb2.ACK_STATUS_REJECTED,
        frame_pb2.ACK_STATUS_SHED,
    }
)


def is_final(status: int) -> bool:
    """True when `status` settles the frame (PROCESSED, DUPLICATE, REJECTED, SHED)."""
    return status in FINAL_STATUSES


def make_ack(
    camera_id: str,
    sequence: int,
    status: int = frame_pb2.ACK_STATUS_QUEUED,
    reason: str = "",
    session_id: int = 0,
    retry_after_ms: int = 0,
) -> frame_pb2.FrameAck:
    """An ack for one frame, stamped with this build's protocol version."""
    return frame_pb2.FrameAck(
        version=current_version(),
        camera_id=camera_id,
        sequence=sequence,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        session_id=session_id,
        retry_after_ms=retry_after_ms,
    )


def pack_ack(ack: frame_pb2.FrameAck) -> list[bytes]:
    """Parts of an ack (a ROUTER puts the peer's identity in front)."""
    return [ack.SerializeToString()]


def unpack_ack(parts: Sequence[Any]) -> frame_pb2.FrameAck:
    """Check a received [ack] message (a heartbeat answer names no frame but carries
    EdgeInfo); raise MalformedMessage saying what is wrong."""
    if len(parts) != 1:
        raise MalformedMessage(REASON_PARTS, f"expected 1 part (ack), got {len(parts)}")
    ack = _parse(frame_pb2.FrameAck(), parts[0], "not a FrameAck")
    _check_version(ack.version, "agent")
    if ack.status == frame_pb2.ACK_STATUS_HEARTBEAT:
        if not ack.HasField("edge"):
            raise MalformedMessage(REASON_FIELDS, "heartbeat answer without EdgeInfo")
    elif not ack.camera_id or ack.sequence < 1:
        raise MalformedMessage(REASON_FIELDS, "ack without camera_id or sequence")
    return ack


def detections_topic(camera_id: str) -> bytes:
    """The edge's PUB topic for one camera's results: its id and one NUL byte.

    ZeroMQ matches subscriptions by prefix; the NUL ends the id (an id never contains one),
    so `SUBSCRIBE detections_topic("cam1")` gets cam1 and never cam10. Subscribe to b""
    for every camera.
    """
    if "\0" in camera_id:
        raise ValueError(f"camera id {camera_id!r} contains a NUL byte")
    return camera_id.encode() + b"\0"


# The prefix of every track-event topic: a NUL first, which no detections topic has (a
# camera id is never empty), so no camera's subscription ever matches events.
EVENTS_TOPIC_PREFIX = b"\0events/"


def events_topic(camera_id: str) -> bytes:
    """The edge's PUB topic for one camera's track events (a copy of the durable ones):
    `EVENTS_TOPIC_PREFIX`, the id, one NUL. Subscribe to `EVENTS_TOPIC_PREFIX` for every
    camera's events; a subscriber to b"" gets results and events, told apart by
    `is_events_topic`."""
    if "\0" in camera_id:
        raise ValueError(f"camera id {camera_id!r} contains a NUL byte")
    return EVENTS_TOPIC_PREFIX + camera_id.encode() + b"\0"


def is_events_topic(topic: bytes) -> bool:
    """The topic is a track-event topic (`events_topic`), not a camera's results."""
    return topic.startswith(EVENTS_TOPIC_PREFIX)


def camera_of_topic(topic: bytes) -> str:
    """The camera id of a PUB topic made by `detections_topic` or `events_topic`."""
    if not topic.endswith(b"\0"):
        raise MalformedMessage(REASON_FIELDS, f"topic {topic!r} does not end in NUL")
    return topic[len(EVENTS_TOPIC_PREFIX) if is_events_topic(topic) else 0 : -1].decode()


__all__ = [
    "EVENTS_TOPIC_PREFIX",
    "FINAL_STATUSES",
    "REASONS",
    "FrameMessage",
    "MalformedMessage",
    "camera_of_topic",
    "detections_topic",
    "events_topic",
    "heartbeat_of",
    "is_events_topic",
    "is_final",
    "make_ack",
    "new_session_id",
    "pack_ack",
    "pack_frame",
    "unpack_ack",
    "unpack_frame",
]
