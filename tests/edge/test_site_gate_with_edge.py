"""The site gate's answers end to end: a real edge node acks each detected frame with its
moving objects, and the real device agent's site gate learns from them (keeping every
frame, as it must before its held-out agreement passes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from device_rig import running_agent, running_edge
from prometheus_client import CollectorRegistry
from strata.device.metrics import CameraCounts
from strata.shared.config.device import (
    CameraConfig,
    CascadeConfig,
    DeviceConfig,
    GateConfig,
    MotionConfig,
    SiteGateConfig,
)
from strata.shared.metrics import sample

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

CLIP = "synthetic://?frames=60&seed=1&width=320&height=240&objects=3&fps=10&realtime=0"


def test_the_edge_answers_teach_the_site_gate(colour_model: Path, zctx: Any) -> None:
    registry = CollectorRegistry()
    with running_edge(colour_model) as edge:
        config = DeviceConfig(
            agent_id="site-gate",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam-a", source=CLIP)],
            motion=MotionConfig(enabled=False),
            gate=GateConfig(site=SiteGateConfig(enabled=True)),
            # Every frame detected and answered: a strided calibration burst (the default)
            # drops the frames between its own.
            cascade=CascadeConfig(burst_stride=1),
        )
        with running_agent(config, registry, drain_s=10.0) as agent:
            assert agent.wait(timeout=120)
    assert agent.site is not None
    st = agent.site.gate.status("cam-a")
    assert st is not None
    counts = CameraCounts.read(registry, "cam-a")
    # Every frame was answered: one in holdout_every a probe, the rest training samples.
    trained = sample(
        registry, "strata_device_gate_site_training_samples_total", {"camera": "cam-a"}
    )
    probes = sample(registry, "strata_device_gate_site_probes_total", {"camera": "cam-a"})
    assert trained == st.samples and trained > 30
    assert probes == st.positives + st.negatives and probes > 5
    assert trained + probes == counts.acked == 60
    # Both kinds of answer came (objects new or moving, and settled ones), but 60 frames are
    # short of min_training: the gate stays off and drops nothing.
    assert st.positives > 0 and st.samples < SiteGateConfig().min_training and not st.on
    assert counts.dropped_gate == 0
    assert sample(registry, "strata_device_gate_site_on", {"camera": "cam-a"}) in (None, 0.0)
