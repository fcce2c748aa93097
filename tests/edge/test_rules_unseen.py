"""Issue 39: rules for a camera that never appears are refused in the open once the edge
knows its cameras: an ERROR naming the camera (with a guess), and a gauge on /metrics."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from strata.edge.metrics import RulesCollector
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.frame import TrackFrame
from strata.shared.config import validate_model
from strata.shared.config.rules import RulesConfig

NS = 1_000_000_000
ZONE = {"zones": [{"name": "z", "points": [[0, 0], [1, 0], [1, 1], [0, 1]]}]}


def empty(camera: str, t_s: float) -> TrackFrame:
    return TrackFrame(
        camera_id=camera,
        capture_ns=round(t_s * NS),
        frame_size=(100, 100),
        track_ids=np.zeros(0, np.uint64),
        boxes=np.zeros((0, 4)),
        scores=np.zeros(0),
        class_ids=np.zeros(0, np.int64),
        confirmed=np.zeros(0, bool),
        observed=np.zeros(0, bool),
        labels=("person",),
        ended=(),
    )


def test_a_rules_camera_that_never_sends_a_frame_is_reported_once_after_the_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = validate_model(
        RulesConfig, {"cameras": {"front-door": ZONE, "garage": ZONE}, "unseen_camera_s": 30}
    )
    eng = RulesEngine(cfg, "edge-a", wall_ns=lambda: 1_000 * NS)
    registry = CollectorRegistry()
    registry.register(RulesCollector(eng.counts))
    gauge = "strata_edge_rules_camera_unseen"
    with caplog.at_level(logging.ERROR, logger="strata.edge.rules.engine"):
        for t in range(0, 29):  # inside the window: nothing said yet
            eng.process(empty("frontdoor", 100.0 + t))
            eng.process(empty("garage", 100.0 + t))
        assert not caplog.records and eng.unseen == []
        assert registry.get_sample_value(gauge, {"camera": "front-door"}) is None
        for t in range(29, 40):
            eng.process(empty("frontdoor", 100.0 + t))
    assert eng.unseen == ["front-door"]
    assert registry.get_sample_value(gauge, {"camera": "front-door"}) == 1.0
    assert registry.get_sample_value(gauge, {"camera": "garage"}) is None
    (rec,) = caplog.records  # once, not at every frame
    msg = rec.getMessage()
    assert rec.levelno == logging.ERROR
    assert "rules.cameras.front-door: refused" in msg and "did you mean 'frontdoor'?" in msg
    # The camera turns up after all (a slow start): the report is withdrawn.
    eng.process(empty("front-door", 141.0))
    assert eng.unseen == []
    assert registry.get_sample_value(gauge, {"camera": "front-door"}) is None


def test_the_window_is_a_config_key_with_its_bound() -> None:
    with pytest.raises(ValueError, match="unseen_camera_s"):
        validate_model(RulesConfig, {"unseen_camera_s": 0})
