import pytest
from strata.shared.contracts import (
    PROTOCOL_MAJOR,
    ProtocolVersionError,
    check_version,
    common_pb2,
    current_version,
    frame_pb2,
)


def test_roundtrip_header() -> None:
    h = frame_pb2.FrameHeader(
        version=current_version(),
        camera_id="cam",
        sequence=7,
        encoding=common_pb2.ENCODING_JPEG,
        payload_size=10,
    )
    back = frame_pb2.FrameHeader.FromString(h.SerializeToString())
    assert back.sequence == 7 and back.camera_id == "cam"
    check_version(back.version)


def test_unknown_major_is_a_clear_error() -> None:
    with pytest.raises(ProtocolVersionError, match=r"unsupported protocol version 9\.0"):
        check_version(common_pb2.ProtocolVersion(major=9))
    check_version(common_pb2.ProtocolVersion(major=PROTOCOL_MAJOR, minor=99))


def test_track_events_ride_the_uplink_batch_compatibly() -> None:
    from strata.shared.contracts import analytics_pb2, events_pb2

    ev = events_pb2.TrackEvent(
        version=current_version(),
        idempotency_key="door/1000-7/2/line_crossed",
        type=events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED,
        camera_id="door",
        track_id=7,
        line="entry",
        direction=events_pb2.CROSSING_DIRECTION_IN,
        after=events_pb2.TrackState(label="person", current_zones=["shop"]),
    )
    ev.path.points.add(x=0.5, y=0.9, capture_ns=1000, observed=False)
    batch = analytics_pb2.CropBatch(version=current_version(), events=[ev])
    back = analytics_pb2.CropBatch.FromString(batch.SerializeToString())
    assert back.events[0] == ev and not back.crops
    # A batch from an edge of protocol 2.0 (crops only) parses with no events.
    old = analytics_pb2.CropBatch(version=common_pb2.ProtocolVersion(major=PROTOCOL_MAJOR))
    old.crops.add(crop_id="c1")
    assert not analytics_pb2.CropBatch.FromString(old.SerializeToString()).events
    ack = analytics_pb2.UplinkResponse(
        event_acks=[events_pb2.TrackEventAck(idempotency_key=ev.idempotency_key)]
    )
    assert (
        analytics_pb2.UplinkResponse.FromString(ack.SerializeToString()).event_acks[0]
        == ack.event_acks[0]
    )
