import time

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
    camera_of_topic,
    detections_topic,
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


def test_detection_topics_match_one_camera_on_real_sockets() -> None:
    ctx = zmq.Context()
    try:
        pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
        for sock in (pub, sub):
            sock.setsockopt(zmq.LINGER, 0)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        sub.setsockopt(zmq.SUBSCRIBE, detections_topic("cam1"))
        sub.connect(f"tcp://127.0.0.1:{port}")
        got: list[str] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:  # until the subscription has joined
            pub.send_multipart([detections_topic("cam1"), b"join"])
            if sub.poll(50):
                got.append(camera_of_topic(sub.recv_multipart()[0]))
        assert got == ["cam1"]
        for cam in ("cam10", "cam1", "cam1x", "cam", "cam1"):
            pub.send_multipart([detections_topic(cam), cam.encode()])
        while sub.poll(300):
            topic, body = sub.recv_multipart()
            if body != b"join":
                got.append(camera_of_topic(topic))
        assert got == ["cam1", "cam1", "cam1"]
    finally:
        ctx.destroy(linger=0)


def test_a_camera_id_with_a_nul_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        detections_topic("cam\0x")
    with pytest.raises(MalformedMessage) as exc:
        unpack_frame(pack_frame(_header(camera_id="cam\0x"), b"\0" * 24))
    assert exc.value.reason == REASON_FIELDS
    with pytest.raises(MalformedMessage):
        camera_of_topic(b"cam1")


def test_a_run_unfolds_into_the_skipped_headers_it_stands_for() -> None:
    from strata.shared.wire import unfold_run

    carrier = frame_pb2.FrameHeader(
        agent_id="a",
        camera_id="cam",
        session_id=7,
        sequence=42,
        frame_index=9,
        capture_ns=900,
        motion_score=0.5,
        kind=frame_pb2.FRAME_KIND_SKIPPED,
        skip_reason="motion",
        source_width=640,
        source_height=480,
        earlier_skipped=[
            frame_pb2.SkippedFrame(
                frame_index=7, capture_ns=700, motion_score=0.1, skip_reason="min_gap"
            ),
            frame_pb2.SkippedFrame(frame_index=8, capture_ns=800, skip_reason="motion"),
        ],
    )
    early = unfold_run(carrier)
    assert [(h.frame_index, h.capture_ns, h.skip_reason) for h in early] == [
        (7, 700, "min_gap"),
        (8, 800, "motion"),
    ]
    assert early[0].motion_score == pytest.approx(0.1) and early[1].motion_score == 0.0
    for h in early:  # the carrier's own fields, no run of their own
        assert (h.camera_id, h.session_id, h.sequence, h.kind) == ("cam", 7, 42, carrier.kind)
        assert (h.source_width, h.source_height) == (640, 480) and not h.earlier_skipped
    assert len(carrier.earlier_skipped) == 2  # untouched
    assert unfold_run(frame_pb2.FrameHeader(frame_index=3)) == []
