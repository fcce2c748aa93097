"""Ingest's checks: a good frame is queued, anything malformed gets REJECTED with a
reason (counted), the precheck's answer wins, silent cameras are forgotten."""

from __future__ import annotations

import numpy as np
from strata.edge.ingest.intake import Ingest
from strata.edge.metrics import EdgeMetrics
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.metrics import sample
from strata.shared.wire import make_ack, pack_frame

IMG = np.zeros((4, 6, 3), np.uint8)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def frame(cam: str = "cam", seq: int = 1, width: int = 6) -> list[bytes]:
    h = frame_pb2.FrameHeader(
        camera_id=cam,
        sequence=seq,
        session_id=7,
        width=width,
        height=4,
        encoding=common_pb2.ENCODING_BGR,
    )
    return [bytes(p) for p in pack_frame(h, IMG)]


def test_a_good_frame_is_queued_and_a_bad_one_rejected_with_a_reason() -> None:
    metrics = EdgeMetrics()
    ingest = Ingest(EdgeConfig(), metrics)
    ok = ingest.handle(frame())
    assert ok.ack.status == frame_pb2.ACK_STATUS_QUEUED and ok.frame is not None
    assert ok.frame.header.camera_id == "cam"
    bad = ingest.handle(frame(seq=2, width=7))  # the payload is not 7 x 4 x 3 bytes
    assert bad.ack.status == frame_pb2.ACK_STATUS_REJECTED and bad.frame is None
    assert bad.ack.reason
    assert ingest.handle([b"not a header", b""]).ack.status == frame_pb2.ACK_STATUS_REJECTED
    reg = metrics.registry
    assert sample(reg, "strata_edge_frames_total", {"status": "accepted"}) == 1


def test_the_precheck_answers_for_frames_the_node_will_not_take() -> None:
    busy = make_ack("cam", 1, frame_pb2.ACK_STATUS_BUSY)
    ingest = Ingest(EdgeConfig(), EdgeMetrics(), precheck=lambda h: busy)
    got = ingest.handle(frame())
    assert got.ack is busy and got.frame is None


def test_cameras_over_the_limit_are_rejected_and_silent_ones_forgotten() -> None:
    clock = Clock()
    cfg = EdgeConfig.model_validate(
        {"batching": {"max_cameras": 1}, "ingest": {"camera_idle_s": 5}}
    )
    ingest = Ingest(cfg, EdgeMetrics(), clock=clock)
    assert ingest.handle(frame("a")).frame is not None
    assert ingest.handle(frame("b")).ack.status == frame_pb2.ACK_STATUS_REJECTED
    clock.t = 6.0
    assert ingest.idle_cameras() == ["a"]
    ingest.forget(["a"])
    assert ingest.handle(frame("b")).frame is not None
