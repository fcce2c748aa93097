"""The sender against a real ZeroMQ ROUTER on 127.0.0.1: spool, window, resend, overflow."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.device.metrics import CameraCounts
from strata.device.transport.sink import FrameSink, Received
from strata.shared.config.device import CameraConfig, GateConfig, SenderConfig

from .conftest import fast_config

SYNTH = "synthetic://?frames=40&seed=1&width=160&height=120"


def _wait(cond: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def _in_order_once(got: list[Received]) -> list[int]:
    fresh = [r.sequence for r in got if not r.duplicate]
    assert fresh == sorted(fresh) and len(set(fresh)) == len(fresh)
    return fresh


def test_no_edge_spools_then_a_late_router_gets_every_frame_once_in_order(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(
        edge, None, cameras=[CameraConfig(id="cam", source=SYNTH)], sender=SenderConfig(window=4)
    )
    agent = Agent(cfg, registry=CollectorRegistry())
    agent.start()
    assert agent.wait(20.0)
    assert _wait(lambda: len(agent.inbox) == 0 and agent.sender.pending() > 0, 5.0)
    time.sleep(0.3)
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    kept = counts.decoded - counts.dropped_motion
    assert kept > 10 and counts.sent == 0  # nothing left: no edge yet
    assert counts.spooled >= kept - cfg.sender.window
    assert agent.sender.pending() == kept
    with FrameSink(edge) as sink:
        assert sink.wait_for(kept, 10.0), sink.stats
        agent.stop(drain_timeout_s=5.0)
        got = sink.received()
    assert [r.duplicate for r in got] == [False] * kept  # exactly once: no resend needed
    seqs = _in_order_once(got)
    assert len(seqs) == kept and seqs == list(range(seqs[0], seqs[0] + kept))
    assert [r.frame_index for r in got] == sorted(r.frame_index for r in got)
    after = CameraCounts.read(agent.metrics.registry, "cam")
    assert after.sent == kept and after.acked == kept and after.overflowed == 0


def test_full_spool_drops_the_oldest_counted_and_logged(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=SYNTH)],
        sender=SenderConfig(window=2, spool_frames=5),
    )
    caplog.set_level(logging.WARNING)
    agent = Agent(cfg, registry=CollectorRegistry())
    agent.start()
    assert agent.wait(20.0)
    assert _wait(lambda: len(agent.inbox) == 0, 5.0)
    time.sleep(0.2)
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    kept = counts.decoded - counts.dropped_motion
    assert counts.overflowed == kept - 5 > 0
    assert any("spool full" in r.getMessage() and "cam" in r.getMessage() for r in caplog.records)
    with FrameSink(edge) as sink:
        assert sink.wait_for(5, 10.0)
        agent.stop(drain_timeout_s=5.0)
        got = sink.received()
    seqs = _in_order_once(got)
    assert len(seqs) == 5  # the newest five survived
    assert seqs[-1] - seqs[0] == 4


def test_edge_restart_mid_stream_loses_nothing(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    src = "synthetic://?frames=80&seed=2&width=160&height=120&fps=40&realtime=1"
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=src)],
        sender=SenderConfig(window=8, ack_timeout_s=0.5),
    )
    agent = Agent(cfg, registry=CollectorRegistry())
    first = FrameSink(edge)
    first.start()
    agent.start()
    assert first.wait_for(5, 10.0)
    first.stop()  # the edge goes away mid-stream ...
    time.sleep(0.6)
    second = FrameSink(edge)
    second.start()  # ... and comes back (state lost, like a restarted node)
    assert agent.wait(20.0)
    agent.stop(drain_timeout_s=8.0)
    second.stop()
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    kept = counts.decoded - counts.dropped_motion
    fresh_first = _in_order_once(first.received())
    fresh_second = [r.sequence for r in second.received() if r.sequence > fresh_first[-1]]
    assert fresh_second == sorted(set(fresh_second))
    delivered = sorted(set(fresh_first) | {r.sequence for r in second.received()})
    assert len(delivered) == kept, (len(delivered), kept, counts)
    assert counts.acked == kept and agent.sender.pending() == 0


def test_an_edge_that_never_acks_gets_resends_and_the_spool_holds(port: int) -> None:
    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=SYNTH)],
        sender=SenderConfig(window=3, ack_timeout_s=0.2),
    )
    agent = Agent(cfg, registry=CollectorRegistry())
    with FrameSink(edge, ack=False) as sink:
        agent.start()
        assert agent.wait(20.0)
        assert _wait(
            lambda: CameraCounts.read(agent.metrics.registry, "cam").retransmitted >= 6, 5.0
        )
        agent.stop(drain_timeout_s=0.0)
        got = sink.received()
    counts = CameraCounts.read(agent.metrics.registry, "cam")
    assert counts.sent == 3 and counts.acked == 0
    assert {r.sequence for r in got} == {got[0].sequence + i for i in range(3)}


@pytest.mark.parametrize("encoding", ["jpeg", "bgr"])
def test_payload_encodings_arrive_intact(port: int, red_model: Path, encoding: str) -> None:
    import zmq
    from strata.shared.wire import make_ack, pack_ack, unpack_frame

    edge = f"tcp://127.0.0.1:{port}"
    cfg = fast_config(
        edge,
        None,
        cameras=[CameraConfig(id="cam", source=SYNTH)],
        sender=SenderConfig(encoding=encoding),  # type: ignore[arg-type]
        # Class 0 of the test classifier is "not red": the grey scene passes.
        gate=GateConfig(model_path=str(red_model), positive_class_ids=[0], threshold=0.5),
    )
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.bind(edge)
    agent = Agent(cfg, registry=CollectorRegistry())
    agent.start()
    try:
        assert router.poll(10_000)
        ident, *parts = router.recv_multipart(copy=False)
        msg = unpack_frame(parts)
        router.send_multipart([ident.bytes, *pack_ack(make_ack("cam", msg.header.sequence))])
    finally:
        agent.stop(drain_timeout_s=0.0)
        router.close(0)
    h = msg.header
    assert (h.width, h.height, h.agent_id, h.camera_id) == (160, 120, "test-agent", "cam")
    assert h.gate_score >= 0.5  # the gate ran and kept it
    if encoding == "jpeg":
        import cv2
        import numpy as np

        img = cv2.imdecode(np.frombuffer(msg.payload, np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (120, 160, 3)
    else:
        assert msg.payload.nbytes == 160 * 120 * 3


def test_the_senders_plain_send_flags_are_zeromqs() -> None:
    import zmq
    from strata.device.transport import sender

    assert sender._NOBLOCK == zmq.NOBLOCK
    assert sender._MORE == zmq.NOBLOCK | zmq.SNDMORE
