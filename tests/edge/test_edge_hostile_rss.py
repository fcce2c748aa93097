"""Memory a hostile peer can make the `strata edge` daemon hold, read from /proc of the real
process: the decode bomb and a 200 MB message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent
from hostile_testkit import BOMB_SIDE, PeakRss, decode_bomb
from prometheus_client.parser import text_string_to_metric_families
from strata.shared.contracts import common_pb2, frame_pb2
from strata.shared.loopback import free_port
from strata.shared.synthetic import SyntheticClip
from strata.shared.wire import pack_frame

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

STRATA = [sys.executable, "-m", "strata.tools.cli"]
DELAY_TARGET_MS = 200.0
MB = 1 << 20


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    listen: str
    publish: str
    metrics_port: int

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        total = 0.0
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += s.value
        return total


@pytest.fixture(scope="module")
def daemon(colour_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    listen, publish = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    cfg = tmp_path_factory.mktemp("edge") / "strata.yaml"
    cfg.write_text(
        f"edge:\n  listen: {listen}\n  publish: {publish}\n"
        f"  model:\n    path: {colour_model}\n    input_size: {MODEL_SIZE}\n"
        f"  batching:\n    max_queue_delay_ms: 2\n    delay_target_ms: {DELAY_TARGET_MS}\n"
        f"  metrics:\n    port: {mport}\n"
    )
    proc = subprocess.Popen(
        [*STRATA, "edge", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    yield Daemon(proc, listen, publish, mport)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


def jpeg_frame(camera: str, seq: int, payload: bytes, width: int, height: int) -> list[Any]:
    header = frame_pb2.FrameHeader(
        camera_id=camera,
        sequence=seq,
        session_id=9,
        width=width,
        height=height,
        encoding=common_pb2.ENCODING_JPEG,
        capture_ns=time.time_ns(),
    )
    return pack_frame(header, payload)


def warm_up(daemon: Daemon, agent: RawAgent, sub: Listener, clip: SyntheticClip) -> int:
    """Frames until the daemon is up and its results reach `sub`; returns the next seq."""
    seq, deadline = 0, time.monotonic() + 45
    while time.monotonic() < deadline:
        seq += 1
        agent.send_image("warm", seq, clip.frame(30).image, common_pb2.ENCODING_JPEG, 30)
        if sub.collect(1, timeout_s=1.0):
            break
    else:
        raise AssertionError("the edge daemon never answered")
    for _ in range(3):  # JPEG decoder and model warm
        seq += 1
        agent.send_image("warm", seq, clip.frame(30).image, common_pb2.ENCODING_JPEG, 30)
        sub.collect(1, timeout_s=5.0)
    agent.acks(2 * seq, timeout_s=2.0)  # QUEUED, then PROCESSED once published
    while sub.collect(1, timeout_s=0.2):
        pass
    return seq + 1


def test_decode_bomb_is_rejected_before_decoding(
    daemon: Daemon, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    agent, sub = RawAgent(zctx, daemon.listen), Listener(zctx, daemon.publish)
    warm_up(daemon, agent, sub, synthetic_clip)
    legit = synthetic_clip.frame(30).image
    h, w = legit.shape[:2]
    bomb = decode_bomb()
    assert len(bomb) == 631
    peak = PeakRss(daemon.proc.pid)
    # Small header (the frame's own size), and a header that agrees with the bomb.
    agent.sock.send_multipart(jpeg_frame("cam", 1, bomb, w, h), copy=False)
    agent.sock.send_multipart(jpeg_frame("cam", 2, bomb, BOMB_SIDE, BOMB_SIDE), copy=False)
    time.sleep(0.01)
    sent = time.monotonic()
    agent.send_image("cam", 3, legit, common_pb2.ENCODING_JPEG, 30)
    results = sub.collect(1, timeout_s=5.0)
    took_ms = (time.monotonic() - sent) * 1e3
    acks = agent.acks(3)
    growth = peak.growth()
    print(f"decode bomb: edge peak RSS growth {growth / MB:.1f} MB, next frame {took_ms:.0f} ms")
    assert [a.status for a in acks[:2]] == [frame_pb2.ACK_STATUS_REJECTED] * 2
    assert all(a.reason.startswith("too_large") for a in acks[:2]), acks
    assert acks[2].status == frame_pb2.ACK_STATUS_QUEUED
    assert [r.sequence for r in results] == [3]
    assert took_ms < DELAY_TARGET_MS
    assert growth < 20 * MB
    assert daemon.metric("strata_edge_rejected_total", {"reason": "too_large"}) == 2


def test_a_200_mb_message_is_dropped_unread(
    daemon: Daemon, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    agent, sub = RawAgent(zctx, daemon.listen), Listener(zctx, daemon.publish)
    warm_up(daemon, agent, sub, synthetic_clip)
    before = daemon.metric("strata_edge_peer_events_total", {"event": "disconnected"})
    accepted = daemon.metric("strata_edge_frames_total", {"status": "accepted"})
    huge = bytearray(200 * MB)
    peak = PeakRss(daemon.proc.pid)
    flood = RawAgent(zctx, daemon.listen)
    flood.sock.send_multipart(jpeg_frame("cam", 1, huge, 640, 480), copy=False)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        daemon.metric("strata_edge_peer_events_total", {"event": "disconnected"}) == before
    ):
        time.sleep(0.1)
    growth = peak.growth()
    print(f"200 MB message: edge peak RSS growth {growth / MB:.1f} MB")
    assert daemon.metric("strata_edge_peer_events_total", {"event": "disconnected"}) > before
    assert growth < 20 * MB
    assert daemon.metric("strata_edge_frames_total", {"status": "accepted"}) == accepted
    flood.sock.close(0)
    # Everyone else is still served.
    agent.send_image("other", 1, synthetic_clip.frame(30).image, frame_index=30)
    assert [r.camera_id for r in sub.collect(1, timeout_s=5.0)] == ["other"]
