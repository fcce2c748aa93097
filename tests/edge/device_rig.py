"""A real edge node with the real device agent in front of it, on loopback: what the tests of
the two daemons together share (the cascade's floor and target, the site gate's answers,
the console's device state)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from prometheus_client import CollectorRegistry
from strata.device.agent import Agent
from strata.edge.build import build_node
from strata.edge.node import EdgeNode
from strata.shared.config.device import DeviceConfig
from strata.shared.config.edge import EdgeConfig
from strata.shared.contracts import frame_pb2

# Small batches that go out at once: the tests count frames, not throughput.
EDGE_BASE: dict[str, Any] = {
    "listen": "tcp://127.0.0.1:0",
    "publish": "tcp://127.0.0.1:0",
    "model": {"input_size": MODEL_SIZE},
    "batching": {"max_batch": 4, "max_queue_delay_ms": 5, "queue_per_camera": 64},
}

# A test that counts every frame of a cascade: no GPU-pressure degrading on a loaded CI
# machine, and credits for a whole burst when the clip plays faster than it decodes.
COUNTED: dict[str, Any] = {
    "overload": {"gpu_pressure": {"enabled": False}},
    "flow": {"min_credits": 64},
}


@dataclass
class EdgeRig:
    node: EdgeNode
    listen: str
    sub: Listener | None  # results of `camera` (every camera's when ""), or none asked for

    def collect(self, n: int, timeout_s: float) -> list[frame_pb2.FrameDetections]:
        """Up to `n` results of the subscribed camera within `timeout_s`."""
        assert self.sub is not None, "running_edge was given no zctx and probe"
        return self.sub.collect(n, timeout_s=timeout_s)


@contextmanager
def running_edge(
    model: Path,
    zctx: Any = None,
    probe: np.ndarray | None = None,
    camera: str = "",
    **sections: Any,
) -> Iterator[EdgeRig]:
    """A started node with EDGE_BASE and `sections` (top-level EdgeConfig keys); with a
    ZeroMQ context and a probe image, a subscriber that already gets results (PUB/SUB's slow
    join loses none of the test's). Stopped on the way out."""
    node = build_node(EdgeConfig.model_validate({**EDGE_BASE, **sections}), model)
    ep = node.start()
    try:
        sub = None
        if zctx is not None and probe is not None:
            sub = Listener(zctx, ep.publish, camera)
            probes = RawAgent(zctx, ep.listen, "probe")
            wait_until_subscribed(probes, sub, probe, camera=camera or "probe")
        yield EdgeRig(node, ep.listen, sub)
    finally:
        node.stop()


@contextmanager
def running_agent(
    config: DeviceConfig, registry: CollectorRegistry | None = None, drain_s: float = 5.0
) -> Iterator[Agent]:
    """The real device agent, started; stopped (draining `drain_s`) on the way out."""
    agent = Agent(config, registry=registry if registry is not None else CollectorRegistry())
    agent.start()
    try:
        yield agent
    finally:
        agent.stop(drain_timeout_s=drain_s)
