"""A standby model: session built, no batch buffers; it takes over an edge node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from edge_testkit import MODEL_SIZE, Listener, RawAgent, wait_until_subscribed
from strata.edge.node import EdgeNode
from strata.edge.standby import StandbyModel
from strata.shared.config.edge import EdgeConfig
from strata.shared.runtime import ModelLoadError
from strata.shared.synthetic import SyntheticClip

pytestmark = pytest.mark.timeout(60)


def cfg(**runtime: Any) -> EdgeConfig:
    return EdgeConfig.model_validate(
        {
            "listen": "tcp://127.0.0.1:0",
            "publish": "tcp://127.0.0.1:0",
            "model": {"input_size": MODEL_SIZE},
            "batching": {"max_batch": 4},
            "runtime": runtime,
        }
    )


def test_a_standby_takes_over_a_node(
    colour_model: Path, zctx: Any, synthetic_clip: SyntheticClip
) -> None:
    standby = StandbyModel(colour_model, cfg())
    runner = standby.take_over(4)
    assert runner.host_input(0).shape == (4, 3, MODEL_SIZE, MODEL_SIZE)
    node = EdgeNode(cfg(), colour_model, "colour", runner=runner)
    node.start()
    try:
        sub = Listener(zctx, node.endpoints.publish)
        agent = RawAgent(zctx, node.endpoints.listen)
        wait_until_subscribed(agent, sub, synthetic_clip.frame(0).image)
        agent.send_image("cam", 1, synthetic_clip.frame(30).image)
        (msg,) = sub.collect(1)
        assert msg.camera_id == "cam" and len(msg.detections) > 0
    finally:
        node.stop()


def test_a_gpu_back_end_standby_is_refused_clearly(colour_model: Path) -> None:
    with pytest.raises(ModelLoadError, match="needs a CPU back end"):
        StandbyModel(colour_model, cfg(backend="tensorrt"))
