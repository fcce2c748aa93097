"""The agent's payloads against a bare ROUTER: scaled frames, H.264 units, dropped frames'
header-only messages in order."""

from __future__ import annotations

import threading
from pathlib import Path

import zmq
from strata.device.agent import Agent
from strata.edge.inference.h264 import H264Decoders
from strata.shared.config.device import CameraConfig, DeviceConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.wire import make_ack


def serve(port: int, got: list[tuple[frame_pb2.FrameHeader, bytes]], stop: threading.Event) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    try:
        while not stop.is_set():
            if not sock.poll(50):
                continue
            ident, head, payload = sock.recv_multipart()
            h = frame_pb2.FrameHeader.FromString(head)
            got.append((h, payload))
            ack = make_ack(h.camera_id, h.sequence, frame_pb2.ACK_STATUS_PROCESSED)
            ack.session_id = h.session_id
            sock.send_multipart([ident, ack.SerializeToString()])
    finally:
        sock.close()


def test_h264_scaled_payloads_decode_at_the_edge(synthetic_mp4: Path, port: int) -> None:
    cfg = DeviceConfig.model_validate(
        {
            "edge": f"tcp://127.0.0.1:{port}",
            "cameras": [CameraConfig(id="cam", source=str(synthetic_mp4))],
            "gate": {"enabled": False},
            "motion": {"enabled": False},
            "sender": {"encoding": "h264", "drain_timeout_s": 10},
            "payload": {"max_width": 160, "max_height": 160},
            # Every frame sent (one H.264 stream of 60): a strided calibration burst (the
            # default) drops the frames between its own.
            "cascade": {"burst_stride": 1},
        }
    )
    got: list[tuple[frame_pb2.FrameHeader, bytes]] = []
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(port, got, stop))
    t.start()
    try:
        assert Agent(cfg).run_until_done(timeout=60) == 0
    finally:
        stop.set()
        t.join()
    frames = [(h, p) for h, p in got if h.kind != frame_pb2.FRAME_KIND_SKIPPED]
    assert len(frames) == 60
    dec = H264Decoders()
    for h, p in frames:
        assert h.encoding == common_pb2.ENCODING_H264
        assert (h.width, h.height, h.source_width, h.source_height) == (160, 120, 320, 240)
        image = dec.decode(
            h.session_id, h.camera_id, h.sequence, h.stream_index, p, h.keyframe, 160, 120
        )
        assert image.shape == (120, 160, 3)
    assert frames[0][0].keyframe and not any(h.keyframe for h, _ in frames[1:])
    assert dec.lost == 0
