"""Hostile peers against a real edge node on loopback ZeroMQ: sessions, made-up cameras,
CURVE. (Memory-bound attacks run against the daemon process: test_edge_hostile_rss.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from edge_testkit import MODEL_SIZE, Listener, RawAgent, receipts, wait_until_subscribed
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.curve import ClientKeys, connect_curve, make_key_pair
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(60)

QUEUED, DUPLICATE = frame_pb2.ACK_STATUS_QUEUED, frame_pb2.ACK_STATUS_DUPLICATE
REJECTED = frame_pb2.ACK_STATUS_REJECTED


@pytest.fixture
def node_factory(colour_model: Path) -> Iterator[Callable[..., EdgeNode]]:
    nodes: list[EdgeNode] = []

    def make(**over: Any) -> EdgeNode:
        cfg: dict[str, Any] = {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "queue_per_camera": 64},
            # Credits that fit these tests' bursts (flow control has its own tests).
            "flow": {"initial_credits": 64},
            **over,
        }
        node = build_node(EdgeConfig.model_validate(cfg), colour_model, "colour")
        node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.stop()


def statuses(acks: list[frame_pb2.FrameAck]) -> list[int]:
    return [a.status for a in acks]


def test_a_bogus_sequence_blocks_nothing(
    node_factory: Callable[..., EdgeNode], zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # Frames are named by (session, camera, sequence): a huge sequence is just one more frame
    # (a lower one may be a BUSY frame sent again), never a watermark that blocks others.
    node = node_factory()
    sub = Listener(zctx, node.endpoints.publish)
    attacker, device = RawAgent(zctx, node.endpoints.listen), RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(device, sub, image)
    attacker.send_image("cam", 2**64 - 1, image, session_id=666)
    attacker.send_image("cam", 5, image, session_id=666)
    assert statuses(receipts(attacker.acks(4))) == [QUEUED, QUEUED]
    # The real device's session is untouched: every frame is taken and processed.
    for seq in range(1, 6):
        device.send_image("cam", seq, image, session_id=42)
    acks = receipts(device.acks(10))
    assert statuses(acks) == [QUEUED] * 5
    assert {a.session_id for a in acks} == {42}
    results = sub.collect(7, timeout_s=10)
    assert sorted((r.session_id, r.sequence) for r in results if r.camera_id == "cam") == [
        *((42, s) for s in range(1, 6)),
        (666, 5),
        (666, 2**64 - 1),
    ]
    # Its own resend is still recognised.
    device.send_image("cam", 5, image, session_id=42)
    assert statuses(device.acks(1)) == [DUPLICATE]


def test_made_up_cameras_are_forgotten_after_the_idle_timeout(
    node_factory: Callable[..., EdgeNode], zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    # 3 s: the 256 made-up cameras must all still be live when the real one comes (their
    # sends and acks took over 1 s on a loaded CI machine, and two were forgotten first).
    node = node_factory(ingest={"camera_idle_s": 3.0})
    reg = node.metrics.registry
    attacker, device = RawAgent(zctx, node.endpoints.listen), RawAgent(zctx, node.endpoints.listen)
    tiny = np.zeros((16, 16, 3), np.uint8)
    for i in range(256):
        attacker.send_image(f"made-up-{i}", 1, tiny, session_id=1)
    assert statuses(receipts(attacker.acks(512))) == [QUEUED] * 256
    device.send_image("real", 1, synthetic_clip.frame(30).image, session_id=7)
    (ack,) = device.acks(1)
    assert ack.status == REJECTED and ack.reason.startswith("cameras")
    assert sample(reg, "strata_edge_rejected_total", {"reason": "cameras"}) == 1
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and sample(reg, "strata_edge_cameras_forgotten_total") < 256:
        time.sleep(0.1)
    assert sample(reg, "strata_edge_cameras_forgotten_total") == 256
    # Their per-camera series and cached results went with them.
    from prometheus_client import generate_latest

    assert b"made-up-" not in generate_latest(reg)
    assert not any(c.startswith("made-up-") for c in node.results.last)
    sub = Listener(zctx, node.endpoints.publish)
    wait_until_subscribed(RawAgent(zctx, node.endpoints.listen), sub, synthetic_clip.frame(0).image)
    device.send_image("real", 2, synthetic_clip.frame(30).image, session_id=7)
    assert statuses(device.acks(1)) == [QUEUED]
    assert [r.sequence for r in sub.collect(1, timeout_s=10)] == [2]
    assert node.ingest.cameras == 2 and node.queues.cameras == 2  # the probe's and this one


class CurveAgent(RawAgent):
    """A RawAgent whose DEALER is a CURVE client (set before connecting)."""

    def __init__(self, ctx: Any, address: str, secret: Path | None, server: Path) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if secret is not None:
            connect_curve(self.sock, str(secret), str(server))
        self.sock.connect(address)
        self.agent_id = "curve"
        self.session_id = 0


def test_curve_admits_allowed_keys_only(
    node_factory: Callable[..., EdgeNode],
    zctx: Any,
    synthetic_clip: SyntheticClip,
    tmp_path: Path,
) -> None:
    server_pub, server_secret = make_key_pair(tmp_path / "server", "edge")
    allowed_pub, allowed_secret = make_key_pair(tmp_path / "agents", "allowed")
    _, unknown_secret = make_key_pair(tmp_path / "strangers", "unknown")
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / allowed_pub.name).write_bytes(allowed_pub.read_bytes())
    node = node_factory(curve={"secret_key": str(server_secret), "clients_dir": str(clients)})
    reg = node.metrics.registry
    image = synthetic_clip.frame(30).image
    stranger = CurveAgent(zctx, node.endpoints.listen, unknown_secret, server_pub)
    plain = CurveAgent(zctx, node.endpoints.listen, None, server_pub)
    for seq in range(1, 4):
        stranger.send_image("cam", seq, image, session_id=1)
        plain.send_image("cam", seq, image, session_id=2)
    assert stranger.acks(1, timeout_s=2.0) == [] and plain.acks(1, timeout_s=0.5) == []
    assert sample(reg, "strata_edge_peers_refused_total", {"reason": "auth"}) >= 1
    assert sample(reg, "strata_edge_peers_refused_total", {"reason": "handshake"}) >= 1
    assert sample(reg, "strata_edge_frames_total", {"status": "accepted"}) == 0

    friend = CurveAgent(zctx, node.endpoints.listen, allowed_secret, server_pub)
    sub = Listener(
        zctx, node.endpoints.publish, curve=ClientKeys(str(allowed_secret), str(server_pub))
    )
    wait_until_subscribed(friend, sub, image)
    friend.send_image("cam", 1, image, session_id=3)
    assert statuses(friend.acks(1)) == [QUEUED]
    assert [r.camera_id for r in sub.collect(1)] == ["cam"]


def test_device_agent_over_curve_with_keys_from_strata_keys(
    node_factory: Callable[..., EdgeNode], zctx: Any, synthetic_clip: SyntheticClip, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry
    from strata.device.agent import Agent
    from strata.shared.config.device import DeviceConfig
    from strata.tools.cli import main

    keys, clients = tmp_path / "keys", tmp_path / "clients"
    assert main(["keys", "edge", "cam-host", "--out", str(keys)]) == 0
    clients.mkdir()
    (clients / "cam-host.key").write_bytes((keys / "cam-host.key").read_bytes())
    node = node_factory(
        curve={"secret_key": str(keys / "edge.key_secret"), "clients_dir": str(clients)}
    )
    agent_keys = ClientKeys(str(keys / "cam-host.key_secret"), str(keys / "edge.key"))
    sub = Listener(zctx, node.endpoints.publish, curve=agent_keys)
    probe = CurveAgent(zctx, node.endpoints.listen, keys / "cam-host.key_secret", keys / "edge.key")
    wait_until_subscribed(probe, sub, synthetic_clip.frame(0).image)
    clip = "synthetic://?frames=10&seed=1&width=320&height=240&objects=3&fps=10&realtime=0"
    agent = Agent(
        DeviceConfig.model_validate(
            {
                "agent_id": "curve-agent",
                "edge": node.endpoints.listen,
                "cameras": [{"id": "cam-a", "source": clip}],
                "motion": {"enabled": False},
                "gate": {"enabled": False},
                "sender": {
                    "curve": {
                        "secret_key": str(keys / "cam-host.key_secret"),
                        "server_key": str(keys / "edge.key"),
                    }
                },
            }
        ),
        registry=CollectorRegistry(),
    )
    try:
        agent.start()
        results = sub.collect(10, timeout_s=30.0)
    finally:
        agent.stop(drain_timeout_s=5.0)
    assert sorted(r.frame_index for r in results) == list(range(10))
    assert {r.camera_id for r in results} == {"cam-a"}


def test_a_jpeg_that_passes_the_check_but_not_the_decoder_is_dropped_in_the_worker(
    node_factory: Callable[..., EdgeNode], zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    import cv2
    from strata.shared.contracts import common_pb2
    from strata.shared.wire import pack_frame

    node = node_factory()
    rejected: list[tuple[int, str]] = []
    node.decoder.on_reject = lambda f, reason, _detail: rejected.append((f.header.sequence, reason))
    reg = node.metrics.registry
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image
    wait_until_subscribed(agent, sub, image)
    h, w = image.shape[:2]
    good = bytes(cv2.imencode(".jpg", image)[1])
    # Its SOF is right (the check passes) but it has no tables: the decoder refuses it.
    i = good.index(b"\xff\xc0")
    bad = good[:2] + good[i : i + 2 + int.from_bytes(good[i + 2 : i + 4], "big")]
    bad += good[good.index(b"\xff\xda") :]
    header = frame_pb2.FrameHeader(
        camera_id="cam",
        sequence=1,
        session_id=5,
        width=w,
        height=h,
        encoding=common_pb2.ENCODING_JPEG,
    )
    agent.sock.send_multipart(pack_frame(header, bad), copy=False)
    agent.send_image("cam", 2, image, common_pb2.ENCODING_JPEG, 30, session_id=5)
    assert statuses(agent.acks(2)) == [QUEUED, QUEUED]
    assert [r.sequence for r in sub.collect(1, timeout_s=10)] == [2]
    assert sub.collect(1, timeout_s=0.5) == []
    assert rejected == [(1, "undecodable")]
    assert sample(reg, "strata_edge_drops_total", {"reason": "undecodable"}) == 1
    assert node.error is None
