import numpy as np
import pytest
import zmq
from strata.shared.contracts import PROTOCOL_MAJOR, common_pb2, frame_pb2
from strata.shared.wire import (
    REASON_FIELDS,
    REASON_HEADER,
    REASON_PARTS,
    REASON_PAYLOAD,
    REASON_VERSION,
    MalformedMessage,
    make_ack,
    pack_ack,
    pack_frame,
    unpack_ack,
    unpack_frame,
)


def _header(**kw: object) -> frame_pb2.FrameHeader:
    base: dict[str, object] = {
        "camera_id": "cam",
        "sequence": 1,
        "width": 4,
        "height": 2,
        "encoding": common_pb2.ENCODING_BGR,
    }
    base.update(kw)
    return frame_pb2.FrameHeader(**base)  # type: ignore[arg-type]


def test_frame_roundtrip_over_real_sockets(port: int) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    dealer = ctx.socket(zmq.DEALER)
    try:
        router.bind(f"tcp://127.0.0.1:{port}")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        image = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
        dealer.send_multipart(pack_frame(_header(sequence=5), image), copy=False)
        assert router.poll(5000)
        ident, *parts = router.recv_multipart(copy=False)
        msg = unpack_frame(parts)
        assert msg.header.sequence == 5 and msg.header.payload_size == 24
        assert msg.header.version.major == PROTOCOL_MAJOR
        assert np.array_equal(np.frombuffer(msg.payload, np.uint8).reshape(2, 4, 3), image)
        router.send_multipart([ident.bytes, *pack_ack(make_ack("cam", 5))])
        assert dealer.poll(5000)
        ack = unpack_ack(dealer.recv_multipart())
        assert (ack.camera_id, ack.sequence, ack.status) == (
            "cam",
            5,
            frame_pb2.ACK_STATUS_QUEUED,
        )
    finally:
        dealer.close(0)
        router.close(0)
        ctx.term()


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        ([b"x"], REASON_PARTS),
        ([b"\xff\xff\xff", b""], REASON_HEADER),
        (
            [
                _header(
                    version=common_pb2.ProtocolVersion(major=9), payload_size=24
                ).SerializeToString(),
                bytes(24),
            ],
            REASON_VERSION,
        ),
        (pack_frame(_header(camera_id=""), bytes(24)), REASON_FIELDS),
        (pack_frame(_header(sequence=0), bytes(24)), REASON_FIELDS),
        (pack_frame(_header(), bytes(23)), REASON_PAYLOAD),
        (pack_frame(_header(encoding=7), bytes(24)), REASON_FIELDS),
    ],
)
def test_malformed_frames_name_their_reason(parts: list[bytes], reason: str) -> None:
    with pytest.raises(MalformedMessage) as info:
        unpack_frame(parts)
    assert info.value.reason == reason


def test_payload_size_mismatch_keeps_the_header_for_a_rejection() -> None:
    parts = pack_frame(_header(sequence=3, encoding=common_pb2.ENCODING_JPEG), b"abc")
    with pytest.raises(MalformedMessage) as info:
        unpack_frame([parts[0], b"abcd"])
    assert info.value.reason == REASON_PAYLOAD
    assert info.value.header is not None and info.value.header.sequence == 3


def test_bad_acks_are_typed_errors() -> None:
    with pytest.raises(MalformedMessage):
        unpack_ack([b"a", b"b"])
    with pytest.raises(MalformedMessage):
        unpack_ack([frame_pb2.FrameAck(camera_id="c", sequence=1).SerializeToString()])
