"""Models and runners at the edge node's boundaries: a fixed-batch export, a stuck worker.

Both with the real node, real ZeroMQ sockets and a real ONNX Runtime session.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_colour_model import build_colour_detector
from edge_testkit import MODEL_SIZE, Listener, RawAgent, deliver, wait_until_subscribed
from strata.edge.build import NodeOptions, build_node
from strata.shared.config.edge import EdgeConfig
from strata.shared.metrics import sample
from strata.shared.runtime import create_runner
from strata.shared.runtime.pool import host_pool
from strata.shared.runtime.staging import HostStagedRunner
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(120)


def _cfg(max_batch: int = 4) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": max_batch, "max_queue_delay_ms": 20, "queue_per_camera": 64},
        }
    )


@pytest.fixture(scope="module")
def batch1_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "colour_b1.onnx"
    return build_colour_detector(path, MODEL_SIZE, batch=1)


def test_a_fixed_batch_1_model_lowers_max_batch_says_so_and_serves(
    batch1_model: Path,
    zctx: Any,
    synthetic_clip: SyntheticClip,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        node = build_node(_cfg(max_batch=4), batch1_model, "colour-b1")
    assert node.max_batch == 1
    assert "lowered from 4 to 1" in caplog.text
    node.start()
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agents = [RawAgent(zctx, node.endpoints.listen, f"agent-{i}") for i in range(2)]
        wait_until_subscribed(agents[0], sub, synthetic_clip.frame(0).image)
        # A burst from two cameras: the queues hold several frames, so the batcher would
        # form batches of 4 if max_batch had not been lowered (ORT: INVALID_ARGUMENT).
        # Each agent resends what the credits answer BUSY, as a device agent does: on a
        # loaded machine the measured capacity of a batch-1 model cuts the credits to one
        # frame per camera, and a frame sent once and refused would never be published.
        frames: list[list[tuple[str, int, np.ndarray]]] = [[], []]
        for i in range(12):
            frames[i % 2].append((f"cam{i % 2}", 100 + i, synthetic_clip.frame(20 + i).image))
        sent = sum(len(f) for f in frames)
        finals: list[dict[tuple[str, int], Any]] = [{}, {}]

        def send(k: int) -> None:
            finals[k] = deliver(agents[k], frames[k], timeout_s=30)

        senders = [threading.Thread(target=send, args=(k,)) for k in range(2)]
        for t in senders:
            t.start()
        got = sub.collect(sent, timeout_s=30)
        for t in senders:
            t.join(35)
        assert len(got) == sent
        assert node.error is None
        reg = node.metrics.registry
        assert sample(reg, "strata_edge_batch_size_bucket", {"le": "1.0"}) == sample(
            reg, "strata_edge_batch_size_count"
        )
        assert sum(len(m.detections) for m in got) > 0
    finally:
        node.stop()


def test_a_fixed_batch_model_runs_partial_batches_padded(tmp_path: Path) -> None:
    model = build_colour_detector(tmp_path / "b3.onnx", 32, batch=3)
    staged = HostStagedRunner(create_runner(model), 8, (3, 32, 32))
    try:
        assert staged.max_batch == 3 and staged.capped_from == 8
        slot = staged.acquire()
        staged.host_input(slot)[:2] = 0.5
        staged.launch(slot, 2)
        assert staged.wait(slot, 2)[0].shape[0] == 2
    finally:
        staged.close()


class _StuckRunner(HostStagedRunner):
    """A runner whose batch never finishes until released (a hung GPU, as SIGSTOP is)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.closed = False

    def wait(self, slot: int, n: int) -> list[np.ndarray]:
        self.entered.set()
        self.release.wait(30)
        return super().wait(slot, n)

    def close(self) -> None:
        self.closed = True
        super().close()


def test_stop_keeps_the_buffers_of_a_worker_that_is_still_running(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    runner = _StuckRunner(create_runner(colour_model), 4, (3, MODEL_SIZE, MODEL_SIZE))
    node = build_node(_cfg(), colour_model, "colour", NodeOptions(runner=runner))
    node.start()
    try:
        agent = RawAgent(zctx, node.endpoints.listen)
        agent.send_image("cam", 1, synthetic_clip.frame(0).image)
        assert runner.entered.wait(20)
        node.stop(join_timeout_s=0.5)
        # The worker is inside wait(): its buffers must not be freed under it.
        assert not runner.closed
        assert sample(node.metrics.registry, "strata_edge_unclean_stops_total") == 1
        assert host_pool().leaks(runner.pool_owner)  # still held, on purpose
    finally:
        runner.release.set()
        for t in node._threads:
            t.join(10)
        runner.close()
    assert host_pool().leaks(runner.pool_owner) == []


def test_a_clean_stop_returns_every_buffer(colour_model: Path) -> None:
    node = build_node(_cfg(), colour_model, "colour")
    node.start()
    owner = node.runner.pool_owner  # type: ignore[attr-defined]
    assert host_pool().leaks(owner)
    node.stop()
    assert host_pool().leaks(owner) == []
    assert sample(node.metrics.registry, "strata_edge_memory_leaks_total") == 0
    assert sample(node.metrics.registry, "strata_edge_unclean_stops_total") == 0
