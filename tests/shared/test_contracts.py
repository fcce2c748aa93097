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
