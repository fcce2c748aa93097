"""The wire contracts (generated from protos/) and the protocol version rules."""

from __future__ import annotations

from . import analytics_pb2, analytics_pb2_grpc, clips_pb2, common_pb2, events_pb2, frame_pb2

PROTOCOL_MAJOR = 2
# Minor 1: track lifecycle and rule events (events.proto) on the uplink and in queries.
# Minor 2: track snapshots (Snapshot) on the uplink, their references in TrackEvent, and
# GetSnapshot.
# Minor 3: event clips (clips.proto): ClipDemand on FrameAck, UploadClip and GetClip.
# Minor 4: FrameAck.moving_objects, what the device's site gate learns from.
# Minor 5, what came with no minor of its own: CascadeFeedback.moving_objects (the
# cascade's floor); TrackEvent.appearance and identity_id, QueryEventsRequest.identity_id and
# SearchSimilar (identities); ClipChunk.cut_back. A 2.4 peer skips them: no floor, no
# identities, no clip cut back.
# Minor 6: FrameHeader.codec_probe_quality and CascadeFeedback.codec_boxes (what the
# payload codec costs the detector).
PROTOCOL_MINOR = 6

# Boxes a camera's codec probes must hold before the edge takes the codec's loss; under
# them the device probes every frame of a burst (CascadeFeedback.codec_boxes).
CODEC_MIN_BOXES = 8


class ProtocolVersionError(ValueError):
    """A peer speaks a major protocol version this build does not understand."""


def current_version() -> common_pb2.ProtocolVersion:
    """The version stamped on every outgoing message."""
    return common_pb2.ProtocolVersion(major=PROTOCOL_MAJOR, minor=PROTOCOL_MINOR)


def check_version(version: common_pb2.ProtocolVersion) -> None:
    """Raise ProtocolVersionError unless the major version is ours (minor may differ)."""
    if version.major != PROTOCOL_MAJOR:
        raise ProtocolVersionError(
            f"unsupported protocol version {version.major}.{version.minor}; "
            f"this build speaks {PROTOCOL_MAJOR}.x"
        )


__all__ = [
    "CODEC_MIN_BOXES",
    "PROTOCOL_MAJOR",
    "PROTOCOL_MINOR",
    "ProtocolVersionError",
    "analytics_pb2",
    "analytics_pb2_grpc",
    "check_version",
    "clips_pb2",
    "common_pb2",
    "current_version",
    "events_pb2",
    "frame_pb2",
]
