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


def test_snapshots_ride_beside_events_compatibly() -> None:
    from strata.shared.contracts import analytics_pb2, events_pb2

    snap = events_pb2.Snapshot(
        version=current_version(),
        snapshot_id="door/1000-7/best_crop/2",
        camera_id="door",
        track_uid="1000-7",
        track_id=7,
        kind=events_pb2.SNAPSHOT_KIND_BEST_CROP,
        revision=2,
        jpeg=b"\xff\xd8\xff\xd9",
        width=64,
        height=128,
        box=common_pb2.Box(x1=4, y1=8, x2=60, y2=120),
        score=0.9,
        quality=0.81,
        touches_edge=True,
        capture_ns=1500,
        reason=events_pb2.SNAPSHOT_REASON_FINAL,
    )
    ev = events_pb2.TrackEvent(
        idempotency_key="door/1000-7/3/end",
        type=events_pb2.TRACK_EVENT_TYPE_END,
        crop_snapshot_id=snap.snapshot_id,
        frame_snapshot_id="door/1000-7/full_frame/2",
    )
    batch = analytics_pb2.CropBatch(version=current_version(), events=[ev], snapshots=[snap])
    back = analytics_pb2.CropBatch.FromString(batch.SerializeToString())
    assert back.snapshots[0] == snap and back.events[0] == ev
    assert back.events[0].crop_snapshot_id == "door/1000-7/best_crop/2"
    # An event of protocol 2.1 (no references) parses with empty ones; a 2.1 batch has no
    # snapshots, and a 2.1 reader skips them as unknown fields.
    old = events_pb2.TrackEvent(idempotency_key="k")
    assert not events_pb2.TrackEvent.FromString(old.SerializeToString()).crop_snapshot_id
    assert not analytics_pb2.CropBatch.FromString(
        analytics_pb2.CropBatch(events=[old]).SerializeToString()
    ).snapshots
    ack = analytics_pb2.UplinkResponse(
        snapshot_acks=[
            events_pb2.SnapshotAck(
                snapshot_id=snap.snapshot_id,
                status=events_pb2.SNAPSHOT_STATUS_INVALID,
                reason="too_large: 3000000 bytes",
            )
        ]
    )
    got = analytics_pb2.UplinkResponse.FromString(ack.SerializeToString())
    assert got.snapshot_acks[0] == ack.snapshot_acks[0] and not got.event_acks
    req = analytics_pb2.GetSnapshotRequest(
        version=current_version(), event_key=ev.idempotency_key, kind=snap.kind
    )
    assert analytics_pb2.GetSnapshotRequest.FromString(req.SerializeToString()) == req


def test_snapshot_ids() -> None:
    from strata.shared.contracts import events_pb2
    from strata.shared.snapshot_ids import parse_kind, parse_snapshot_id, snapshot_id

    sid = snapshot_id("site/door", "1000-7", events_pb2.SNAPSHOT_KIND_FULL_FRAME, 3)
    assert sid == "site/door/1000-7/full_frame/3"
    ref = parse_snapshot_id(sid)
    assert (ref.camera_id, ref.track_uid, ref.kind, ref.revision) == (
        "site/door",
        "1000-7",
        events_pb2.SNAPSHOT_KIND_FULL_FRAME,
        3,
    )
    assert str(ref) == sid
    for bad in ("door/1000-7/best_crop", "door/1000-7/thumb/1", "/1000-7/best_crop/1", "x"):
        with pytest.raises(ValueError, match="snapshot id"):
            parse_snapshot_id(bad)
    assert parse_kind("SNAPSHOT_KIND_BEST_CROP") == events_pb2.SNAPSHOT_KIND_BEST_CROP
    with pytest.raises(ValueError, match="known: best_crop, full_frame"):
        parse_kind("thumb")
