"""Fault injection on the delivery promise, with the real `strata edge` daemon.

A device Sender (the real class, over loopback ZeroMQ) offers frames while the edge is
killed with SIGKILL and restarted, then frozen with SIGSTOP and resumed; a SUB socket
counts every published result. An acknowledged frame must have been published; a frame
published twice must say it is a redelivery. Under overload from several senders, every
frame offered is accounted for: processed, or dropped with a reason.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
import pytest
from edge_testkit import MODEL_SIZE
from prometheus_client import CollectorRegistry
from strata.device.metrics import CameraCounts, DeviceMetrics, dropped_by_reason
from strata.device.transport.sender import Sender
from strata.device.transport.sender_parts import SenderHooks
from strata.shared.config.device import DegradeConfig, SenderConfig
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.synthetic import SyntheticClip
from strata.tools.fleet import EdgeProc
from strata.tools.subscriber import ResultSubscriber

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

STRATA = [sys.executable, "-m", "strata.tools.cli"]
PROCESSED, DUPLICATE = frame_pb2.ACK_STATUS_PROCESSED, frame_pb2.ACK_STATUS_DUPLICATE
Key = tuple[int, str, int]


def edge_daemon(model: Path, tmp: Path) -> EdgeProc:
    """`strata edge` on fixed ports, so a restarted one is found at the same address."""
    return EdgeProc("edge", tmp, model=str(model), input_size=MODEL_SIZE)


class Results(ResultSubscriber):
    """Every result on the PUB socket: how often each frame was published, and flagged how."""

    def __init__(self, address: str) -> None:
        self.seen: dict[Key, list[bool]] = {}
        super().__init__([address])

    def on_result(self, msg: frame_pb2.FrameDetections, received_ns: int) -> None:
        key = (msg.session_id, msg.camera_id, msg.sequence)
        self.seen.setdefault(key, []).append(msg.redelivery)


@pytest.fixture
def daemon(colour_model: Path, tmp_path: Path) -> Iterator[EdgeProc]:
    d = edge_daemon(colour_model, tmp_path)
    d.start()
    yield d
    d.stop()


def _jpeg(clip: SyntheticClip, i: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", clip.frame(i).image, [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok
    return bytes(buf.tobytes())


def test_kill_restart_and_stop_of_the_edge_lose_no_acknowledged_frame(
    daemon: EdgeProc, synthetic_clip: SyntheticClip
) -> None:
    results = Results(daemon.publish)
    finals: dict[Key, int] = {}

    def on_final(cam: str, h: frame_pb2.FrameHeader, ack: frame_pb2.FrameAck) -> None:
        finals[(h.session_id, cam, h.sequence)] = ack.status

    sender = Sender(
        daemon.listen,
        SenderConfig(window=8, ack_timeout_s=1.0),
        DeviceMetrics(CollectorRegistry()),
        degrade=DegradeConfig(enabled=False),  # every offered frame must reach the edge
        hooks=SenderHooks(on_final=on_final),
    )
    sender.add_camera("cam")
    frames = [_jpeg(synthetic_clip, i) for i in range(20)]
    w, h = synthetic_clip.width, synthetic_clip.height
    offered = 0
    stop = threading.Event()

    def produce() -> None:  # 20 frames/s, whatever happens to the edge
        nonlocal offered
        while not stop.wait(0.05):
            header = frame_pb2.FrameHeader(
                camera_id="cam",
                capture_ns=time.time_ns(),
                width=w,
                height=h,
                encoding=common_pb2.ENCODING_JPEG,
                frame_index=offered,
            )
            sender.submit("cam", header, frames[offered % len(frames)])
            offered += 1

    def wait_results(n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(results.seen) < n and time.monotonic() < deadline:
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        sender.start()
        producer.start()
        wait_results(20, 40.0)  # the daemon is up and publishing
        assert len(results.seen) >= 20, daemon.log.read_text()
        daemon.kill()  # kill -9 mid-stream
        time.sleep(2.0)
        daemon.start()  # same ports, new edge session, no memory of the old one
        before = len(results.seen)
        wait_results(before + 20, 40.0)
        daemon.signal(signal.SIGSTOP)  # a hang: nothing answers
        time.sleep(3.0)
        daemon.signal(signal.SIGCONT)
        wait_results(len(results.seen) + 20, 20.0)
        stop.set()
        producer.join()
        deadline = time.monotonic() + 30
        while sender.pending() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # the last results on their way to the SUB socket
    finally:
        stop.set()
        sender.stop(0.0)
        results.close()
    counts = CameraCounts.read(sender.metrics.registry, "cam")
    with results.lock:
        seen = dict(results.seen)
    acked = {k for k, s in finals.items() if s in (PROCESSED, DUPLICATE)}
    # Every frame offered was settled, and settled as processed: nothing given up.
    assert sender.pending() == 0 and offered == len(finals) == len(acked), (offered, counts)
    assert dropped_by_reason(sender.metrics.registry, "cam") == {}
    # 0 acknowledged frames unprocessed: each one's result was published.
    missing = acked - set(seen)
    assert not missing, f"{len(missing)} acked frames never published"
    # Published twice only across the crash, and then flagged as a redelivery.
    twice = {k: flags for k, flags in seen.items() if len(flags) > 1}
    assert all(flags[0] is False and all(flags[1:]) for flags in twice.values()), twice
    assert len(twice) <= 16, twice  # what the dead node published and had not acked
    assert counts.retransmitted > 0  # the kill and the stop did make it resend
    print(f"offered {offered}, published {len(seen)}, twice {len(twice)}, counts {counts}")


def test_overload_from_several_senders_is_fully_accounted_for(tmp_path: Path) -> None:
    # The real edge daemon (starter detector), three open-loop senders at 3x its capacity:
    # what is not processed is dropped at the device with a reason, nothing else.
    from strata.tools.bench.overload import Bench

    args = argparse.Namespace(
        model="",
        input_size=320,
        cameras=3,
        seconds=6.0,
        drain_s=60.0,  # waits only until nothing is pending: a loaded machine drains slowly
        max_batch=4,
        delay_target_ms=200.0,
        window=32,
        drop_policy="oldest",
        width=320,
        height=240,
    )
    bench = Bench(args, tmp_path)
    try:
        bench.warm_up(40.0)
        cap = bench.phase("cap", None)
        time.sleep(2.5)
        over = bench.phase("3x", 3 * cap.goodput_fps)
    finally:
        bench.close()
    print(cap, over, sep="\n")
    for ph in (cap, over):
        assert ph.unaccounted == 0 and ph.pending == 0, ph
        assert ph.offered == ph.processed + sum(ph.dropped.values())
        assert set(ph.dropped) <= {
            "degraded_motion",
            "degraded_rate",
            "degraded_policy",
            "spool_full",
            "rejected",
        }, ph.dropped
    # It was overloaded and shed at the source, counted. (Not "offered > 2 x processed":
    # the node now keeps its full capacity under 3x, and capacity measured in a busier
    # moment of a shared machine than the 3x phase left that with no margin.)
    assert over.offered > over.processed > 0
    assert sum(over.dropped.values()) > 0
    assert over.published_twice == 0


def test_a_killed_edge_is_unreachable_not_overloaded_and_its_return_a_reconnect(
    daemon: EdgeProc, synthetic_clip: SyntheticClip, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 39: an edge killed with -9 was reported by the device as "edge overloaded,
    level 3" (the last level the dead edge asked for) with "reconnects 0"."""
    sender = Sender(
        daemon.listen,
        SenderConfig(window=4, ack_timeout_s=1.0, spool_frames=8),
        DeviceMetrics(CollectorRegistry()),
        degrade=DegradeConfig(enabled=True),
    )
    sender.add_camera("cam")
    frame = _jpeg(synthetic_clip, 0)
    w, h = synthetic_clip.width, synthetic_clip.height
    stop = threading.Event()

    def produce() -> None:  # 20 frames/s, whatever happens to the edge
        i = 0
        while not stop.wait(0.05):
            header = frame_pb2.FrameHeader(
                camera_id="cam", capture_ns=time.time_ns(), width=w, height=h,
                encoding=common_pb2.ENCODING_JPEG, frame_index=i,
            )  # fmt: skip
            sender.submit("cam", header, frame)
            i += 1

    def counts() -> CameraCounts:
        return CameraCounts.read(sender.metrics.registry, "cam")

    def until(cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"{what}: {counts()}\n{daemon.log.read_text()}"
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        sender.start()
        producer.start()
        until(lambda: counts().acked >= 10, 40.0, "the edge never acked")
        with caplog.at_level(logging.INFO, logger="strata.device.transport.sender"):
            daemon.kill()  # kill -9 mid-stream
            time.sleep(0.3)
            # The level the dead edge's last ack asked for, and a camera that needs it.
            degrader = sender.degrader("cam")
            degrader.need = 3
            degrader.set_level(3)
            until(lambda: counts().edge_unreachable == 1, 10.0, "never said unreachable")
            said_at = len(caplog.records)
            time.sleep(0.2)  # a pass of the sender under way
            before = dropped_by_reason(sender.metrics.registry, "cam")
            time.sleep(1.5)  # the spool fills meanwhile
            assert degrader.edge_level == 0  # a dead edge asks nothing
            after = dropped_by_reason(sender.metrics.registry, "cam")
            # Until the timeout the device cannot know; once it is said, no level 3 drops.
            assert after.get("degraded_policy", 0) == before.get("degraded_policy", 0)
            assert after.get("spool_full", 0) > before.get("spool_full", 0)
            daemon.start()  # same ports: the edge is back
            until(lambda: counts().edge_reconnects == 1, 40.0, "its return not counted")
    finally:
        stop.set()
        sender.stop(0.0)
    device = [r for r in caplog.records if r.name.startswith("strata.device")]
    said = [r.getMessage() for r in device]
    assert any(f"edge {daemon.listen} unreachable" in line for line in said), said
    since = [r.getMessage() for r in caplog.records[said_at:] if r.name.startswith("strata.d")]
    assert not any("overloaded" in line for line in since), since
    assert any(f"edge {daemon.listen} answers again" in line for line in said), said
