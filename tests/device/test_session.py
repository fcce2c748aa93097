"""The sender session: random, non-zero, one per agent start, on every frame it sends."""

from __future__ import annotations

from strata.device.metrics import DeviceMetrics
from strata.device.transport.sender import Sender
from strata.device.transport.sender_parts import SenderSetup
from strata.shared.config.device import SenderConfig
from strata.shared.contracts import frame_pb2


def test_each_sender_draws_its_own_session_and_stamps_every_frame() -> None:
    senders = [Sender("tcp://127.0.0.1:9", SenderConfig(), DeviceMetrics()) for _ in range(8)]
    sessions = {s.session_id for s in senders}
    assert len(sessions) == 8 and 0 not in sessions
    assert all(0 < s < 2**64 for s in sessions)
    sender = senders[0]
    sender.add_camera("cam")
    headers = [frame_pb2.FrameHeader(camera_id="cam") for _ in range(3)]
    for h in headers:
        sender.submit("cam", h, b"jpeg")
    assert {h.session_id for h in headers} == {sender.session_id}
    assert (
        Sender(
            "tcp://127.0.0.1:9", SenderConfig(), DeviceMetrics(), setup=SenderSetup(session_id=7)
        ).session_id
        == 7
    )
