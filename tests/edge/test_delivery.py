"""Delivery: which ack a frame gets (precheck, admit, refuse, settle)."""

from __future__ import annotations

from strata.shared.contracts import frame_pb2


def test_h264_units_after_a_busy_one_wait_for_it_so_resends_arrive_in_order() -> None:
    from strata.edge.flow.delivery import Delivery, Served
    from strata.edge.metrics import EdgeMetrics
    from strata.shared.config.edge import EdgeConfig
    from strata.shared.contracts import common_pb2

    d = Delivery(EdgeConfig(), Served(max_batch=4), EdgeMetrics())
    BUSY, QUEUED = frame_pb2.ACK_STATUS_BUSY, frame_pb2.ACK_STATUS_QUEUED  # noqa: N806

    def unit(seq: int, keyframe: bool = False) -> frame_pb2.FrameHeader:
        return frame_pb2.FrameHeader(
            camera_id="cam",
            sequence=seq,
            session_id=3,
            encoding=common_pb2.ENCODING_H264,
            stream_index=seq,
            keyframe=keyframe,
        )

    assert d.precheck(unit(1, keyframe=True)) is None
    assert d.admit(unit(1, keyframe=True)).ack.status == QUEUED
    assert d.precheck(unit(2)) is None
    d.admit(unit(2))
    assert d.refuse(unit(2)).status == BUSY  # its camera's queue was full after all
    # Unit 3 refers to 2: taken now, it could not be decoded; BUSY until 2 is taken.
    refused = d.precheck(unit(3))
    assert refused is not None and refused.status == BUSY
    assert d.precheck(unit(2)) is None and d.admit(unit(2)).ack.status == QUEUED
    assert d.precheck(unit(3)) is None
    # A keyframe needs nothing before it, and ends the wait.
    d.admit(unit(3))
    d.refuse(unit(3))
    assert d.precheck(unit(4)) is not None
    assert d.precheck(unit(5, keyframe=True)) is None
    d.admit(unit(5, keyframe=True))
    assert d.precheck(unit(6)) is None
    # JPEG frames never wait on stream order.
    jpeg = frame_pb2.FrameHeader(camera_id="j", sequence=9, session_id=3)
    d.admit(jpeg)
    d.refuse(jpeg)
    assert d.precheck(frame_pb2.FrameHeader(camera_id="j", sequence=10, session_id=3)) is None


def test_the_credit_floor_keeps_every_runner_slot_fed_and_one_batch_queued() -> None:
    from strata.edge.flow.delivery import Delivery, Served
    from strata.edge.metrics import EdgeMetrics
    from strata.shared.config.edge import EdgeConfig

    # No measured capacity yet and a tiny initial grant: the floor alone decides.
    cfg = EdgeConfig.model_validate({"flow": {"initial_credits": 1, "min_credits": 1}})
    one = Delivery(cfg, Served(max_batch=4, slots=1), EdgeMetrics())
    three = Delivery(cfg, Served(max_batch=4, slots=3), EdgeMetrics())
    assert one.credits.total_credits == 2 * 4  # batches_in_node 2: one served, one queued
    assert three.credits.total_credits == 4 * 4  # three served, one queued
    off = EdgeConfig.model_validate({"flow": {"initial_credits": 1, "batches_in_node": 0}})
    assert Delivery(off, Served(max_batch=4, slots=3), EdgeMetrics()).credits.total_credits < 16
