"""Edge options that change behaviour, each against a real node on loopback ZeroMQ:
`ingest.sessions_per_camera` (the sender sessions a camera remembers) and
`tracking.send_next_uncertainty` (the "send the next frame" feedback on acks)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.metrics import sample
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(90)

QUEUED, PROCESSED = frame_pb2.ACK_STATUS_QUEUED, frame_pb2.ACK_STATUS_PROCESSED


@pytest.fixture
def node_factory(colour_model: Path) -> Iterator[Callable[..., EdgeNode]]:
    nodes: list[EdgeNode] = []

    def make(**over: Any) -> EdgeNode:
        cfg: dict[str, Any] = {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4, "max_queue_delay_ms": 2},
            "flow": {"initial_credits": 64},
            "overload": {"gpu_pressure": {"enabled": False}},
            **over,
        }
        node = build_node(EdgeConfig.model_validate(cfg), colour_model, "colour")
        node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.stop()


@pytest.mark.parametrize("kept", [2, 4])
def test_a_camera_remembers_only_its_newest_sessions(
    node_factory: Callable[..., EdgeNode], zctx: Any, synthetic_clip: SyntheticClip, kept: int
) -> None:
    """Six sender sessions of one camera (six agent restarts): ingest keeps the newest
    `sessions_per_camera`. A forgotten session is not refused: its next frame is taken
    (the delivery ledger names frames by session on its own) and it becomes the newest."""
    node = node_factory(ingest={"sessions_per_camera": kept})
    agent = RawAgent(zctx, node.endpoints.listen)
    image = synthetic_clip.frame(30).image

    def taken(session: int, seq: int) -> None:
        agent.send_image("cam", seq, image, session_id=session)
        acks = agent.acks(2)  # QUEUED, then PROCESSED once published
        assert sorted(a.status for a in acks) == [QUEUED, PROCESSED], (session, acks)
        assert {(a.session_id, a.sequence) for a in acks} == {(session, seq)}

    for session in range(1, 7):
        taken(session, 1)
    assert node.ingest.sessions("cam") == list(range(7 - kept, 7))
    taken(1, 2)
    assert node.ingest.sessions("cam") == [*range(8 - kept, 7), 1]
    reg = node.metrics.registry
    assert sample(reg, "strata_edge_frames_total", {"status": "rejected"}) == 0


def _send_next_flags(node: EdgeNode, zctx: Any, clip: SyntheticClip, frames: int) -> list[bool]:
    """Send `frames` frames of one camera, each after the previous one's result, so what
    the tracker made of frame n is known before frame n+1 is sent; the send_next flag the
    agent heard before each frame: on the previous frame's PROCESSED ack, or on this
    frame's QUEUED ack (the node says it once, on whichever goes first)."""
    sub = Listener(zctx, node.endpoints.publish)
    agent = RawAgent(zctx, node.endpoints.listen)
    wait_until_subscribed(agent, sub, clip.frame(0).image)
    flags: list[bool] = []
    heard = False  # on the previous frame's PROCESSED ack
    for seq in range(1, frames + 1):
        index = 20 + 3 * seq  # every third source frame: the tracker predicts across gaps
        agent.send_image("cam", seq, clip.frame(index).image, frame_index=index)
        acks = agent.acks(2)  # QUEUED now, PROCESSED once published
        queued = [a for a in acks if a.status == QUEUED]
        processed = [a for a in acks if a.status != QUEUED]
        assert len(queued) == 1 and len(processed) == 1, acks
        assert not (heard and queued[0].feedback.send_next)  # said once
        flags.append(heard or queued[0].feedback.send_next)
        heard = processed[0].feedback.send_next
        assert [r.sequence for r in sub.collect(1, timeout_s=10.0)] == [seq]
    return flags


@pytest.mark.parametrize(
    ("limit", "asks"),
    [(0.0, False), (1e-6, True), (1e6, False)],
    ids=["off", "low", "high"],
)
def test_send_next_uncertainty_decides_the_feedback(
    node_factory: Callable[..., EdgeNode],
    zctx: Any,
    synthetic_clip: SyntheticClip,
    limit: float,
    asks: bool,
) -> None:
    """0 turns the request off; above 0, a camera whose tracks' predicted position for its
    next frame is more uncertain than the limit has `send_next` on its next ack. Any
    prediction is more uncertain than 1e-6 box heights, none is 1e6."""
    node = node_factory(tracking={"send_next_uncertainty": limit})
    start = time.monotonic()
    flags = _send_next_flags(node, zctx, synthetic_clip, frames=6)
    assert time.monotonic() - start < 60
    # The first frame has no tracks before it; every later one follows a detected frame.
    assert flags[0] is False
    assert all(f is asks for f in flags[1:]), flags
