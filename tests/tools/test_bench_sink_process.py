"""The benches' stand-in edge in its own process: it acks like FrameSink and reports what
it saw and its own CPU time once stopped."""

from __future__ import annotations

import pytest
import zmq
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.loopback import free_port
from strata.shared.wire import pack_frame, unpack_ack
from strata.tools.bench.sink_process import SinkProcess, StandInEdge


def _frame(seq: int) -> frame_pb2.FrameHeader:
    return frame_pb2.FrameHeader(
        agent_id="a",
        camera_id="cam",
        sequence=seq,
        frame_index=seq,
        width=2,
        height=2,
        encoding=common_pb2.ENCODING_BGR,
    )


def test_the_sink_process_acks_frames_and_reports_them() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    sink = SinkProcess(endpoint, StandInEdge(320, gap=5))
    ctx = zmq.Context.instance()
    with sink:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        try:
            acks = []
            for seq in (1, 2, 2):  # the last one again: a duplicate
                payload = b"\x00" * 12
                h = _frame(seq)
                h.payload_size = len(payload)
                sock.send_multipart(pack_frame(h, payload))
                assert sock.poll(10_000), "no ack within 10 s"
                acks.append(unpack_ack(sock.recv_multipart()))
        finally:
            sock.close(0)
    assert [a.sequence for a in acks] == [1, 2, 2]
    assert acks[0].edge.model_input_width == 320  # announced on the camera's first ack
    # The calibrated gap advised there too, once.
    assert [a.feedback.max_gap_frames for a in acks] == [5, 0, 0]
    assert [a.status for a in acks] == [
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_PROCESSED,
        frame_pb2.ACK_STATUS_DUPLICATE,
    ]
    assert (sink.report.frames, sink.report.duplicates, sink.report.bytes) == (3, 1, 36)
    assert sink.report.cpu_seconds > 0.0


def test_a_sink_that_cannot_bind_says_why() -> None:
    with pytest.raises(RuntimeError, match="could not serve"), SinkProcess("tcp://x:y"):
        pass
