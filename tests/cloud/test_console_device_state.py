"""The device's cascade target and site gate on the console's cameras page (issue 41: "a
missed target shows ... in the console", "the gate's head training and switch-on visible in
metrics and the console"), in Debian's chromium, headless, as the other console tests.

The path is the one a site runs: the device agent's registry on its /metrics (the real
MetricsServer), the cloud console scraping it (cloud.http.scrape), the page drawn from what
it read. One test runs the real device agent against a real edge node with a target it
cannot reach and the site gate training; the other drives the real site gate's head with
answers that separate until it switches on and drops frames, beside a cascade that holds
its target."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser_testkit import chromium, console_errors, screenshot, wait_for
from cloud_helpers import make_config
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from strata.cloud.server import CloudServer
from strata.device.filters.cascade import CascadeMetrics, CascadePolicy
from strata.device.filters.site_gate import SiteGate, SiteGateMetrics
from strata.device.filters.site_head import HeadSettings
from strata.device.metrics import CameraMetrics, DeviceMetrics
from strata.shared.config.common import MetricsConfig
from strata.shared.config.device import CascadeConfig
from strata.shared.contracts import frame_pb2
from strata.shared.loopback import free_port
from strata.shared.metrics_web import MetricsServer

# The edge tests' detector and helpers (tests/ has no packages; as uplink_testkit does).
_EDGE_TESTS = str(Path(__file__).resolve().parents[1] / "edge")
if _EDGE_TESTS not in sys.path:
    sys.path.append(_EDGE_TESTS)


@pytest.fixture
def device_metrics() -> Iterator[tuple[CollectorRegistry, str]]:
    """A device registry served on 127.0.0.1 by the daemons' MetricsServer: (it, its URL)."""
    registry = CollectorRegistry()
    server = MetricsServer(registry, MetricsConfig(port=free_port()), "device.metrics")
    server.start()
    try:
        yield registry, server.url
    finally:
        server.stop()


@pytest.fixture
def console(
    tmp_path: Path,
    colour_model: tuple[Path, Path],
    start_server: Callable[..., CloudServer],
    device_metrics: tuple[CollectorRegistry, str],
) -> str:
    """A cloud console scraping the device's /metrics: its base URL."""
    model, labels = colour_model
    http = {"enabled": True, "listen": "127.0.0.1:0", "scrape": [device_metrics[1]]}
    server = start_server(make_config(model, tmp_path / "events.sqlite", labels, http=http))
    assert server.console is not None
    return str(server.console.url)


def scraped_families(url: str) -> dict[str, list[Any]]:
    """The samples of a /metrics page by family name."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def camera_cells(driver: Any, base: str, camera: str) -> tuple[Any, Any]:
    """The camera's row on /cameras: its cascade and site gate cells."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/cameras")
    row = wait_for(
        f"the camera {camera}",
        lambda: driver.find_elements(By.CSS_SELECTOR, f'#cameras tr[data-camera="{camera}"]'),
    )[0]
    return (
        row.find_element(By.CSS_SELECTOR, "td.cascade"),
        row.find_element(By.CSS_SELECTOR, "td.site-gate"),
    )


def api_camera(base: str, camera: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/api/cameras", timeout=10) as resp:
        cams = json.loads(resp.read())["cameras"]
    return next(c for c in cams if c["camera"] == camera)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_missed_target_and_a_training_site_gate_in_chromium(
    tmp_path: Path, device_metrics: tuple[CollectorRegistry, str], console: str
) -> None:
    """The real agent and a real edge node: target 1.0 with at most one frame in 6
    (max_share), motion gate blind to the objects (as tests/edge/test_cascade_floor.py), the
    site gate on its 60 first answers (short of min_training: training, keeps every frame).
    The console says the target is MISSED and by how much, and the gate's training."""
    from device_rig import COUNTED, running_agent, running_edge
    from edge_colour_model import build_colour_detector
    from edge_testkit import MODEL_SIZE
    from strata.shared.config.device import (
        CameraConfig,
        DeviceConfig,
        GateConfig,
        MotionConfig,
        SiteGateConfig,
    )

    registry, metrics_url = device_metrics
    detector = build_colour_detector(tmp_path / "detector.onnx", MODEL_SIZE)
    clip = "synthetic://?frames=360&seed=3&width=320&height=240&objects=6&fps=30&realtime=1"
    with running_edge(detector, tracking={"calibration_window": 1}, **COUNTED) as edge:
        config = DeviceConfig(
            agent_id="console-state",
            edge=edge.listen,
            cameras=[CameraConfig(id="cam", source=clip)],
            motion=MotionConfig(threshold=1000.0, max_interval_s=0, scene_change=0),
            gate=GateConfig(site=SiteGateConfig(enabled=True)),
            cascade=CascadeConfig(
                target=1.0,
                max_gap=12,
                max_share=1 / 6,
                budget=0,
                calibrate_every=60,
                burst_frames=30,
            ),
        )
        with running_agent(config, registry) as agent:
            assert agent.wait(timeout=150)
    assert agent.site is not None
    st = agent.site.gate.status("cam")
    assert st is not None and st.state == "training" and not st.on

    # The device's /metrics: the target beside its estimate, and the gate's training.
    fams = scraped_families(metrics_url)
    cam = {"camera": "cam"}
    (target,) = fams["strata_device_cascade_target"]
    assert target.labels == {"camera": "cam", "metric": "f1"} and target.value == 1.0
    (estimate,) = fams["strata_device_estimated_accuracy"]
    (missed,) = fams["strata_device_cascade_target_missed"]
    assert estimate.value < 1.0 and missed.value == pytest.approx(1.0 - estimate.value)
    samples = [s for s in fams["strata_device_gate_site_training_samples"] if s.labels == cam]
    assert [s.value for s in samples if s.name.endswith("_total")] == [st.samples]
    assert st.samples > 0
    (on,) = fams["strata_device_gate_site_on"]
    assert on.value == 0.0
    (recall,) = fams["strata_device_gate_site_recall"]
    assert recall.value == st.recall
    states = {s.labels["state"]: s.value for s in fams["strata_device_gate_site_state"]}
    assert states == {"training": 1.0, "off": 0.0, "on": 0.0}

    # The console, in chromium.
    with chromium(tmp_path) as driver:
        cascade, site = camera_cells(driver, console, "cam")
        assert cascade.get_attribute("data-verdict") == "missed"
        assert f"MISSED by {missed.value:.3f}" in cascade.text, cascade.text
        assert f"f1 {estimate.value:.3f}, target 1.000" in cascade.text, cascade.text
        assert cascade.find_elements("css selector", "strong.error"), "said, not whispered"
        assert site.get_attribute("data-state") == "training"
        needs = SiteGateConfig()
        assert f"{st.samples}/{needs.min_training} samples" in site.text, site.text
        assert "0 frames dropped" in site.text, site.text
        screenshot(driver, tmp_path, "cameras-missed")
        assert console_errors(driver) == []
    api = api_camera(console, "cam")
    assert api["cascade"]["verdict"] == "missed"
    assert api["cascade"]["missed_by"] == pytest.approx(missed.value)
    assert api["site_gate"]["state"] == "training"
    assert api["site_gate"]["samples"] == st.samples


def _answers(rng: np.random.Generator, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` features and the edge's answers (objects or none), the two kinds far apart."""
    positive = rng.random(n) < 0.5
    feats = rng.normal(0.0, 1.0, (n, dim)) + np.where(positive, 3.0, -3.0)[:, None]
    return feats.astype(np.float32), positive


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_site_gate_switched_on_and_a_held_target_in_chromium(
    tmp_path: Path, device_metrics: tuple[CollectorRegistry, str], console: str
) -> None:
    """The real site gate on a device registry, answered frame by frame as the agent does
    (its drops counted where the gate worker counts them), switches on and drops empty
    frames; the camera's cascade estimate is over its target. The console says both."""
    registry, _ = device_metrics
    settings = HeadSettings(
        holdout_every=3, window=60, min_positives=10, min_negatives=10, min_training=30
    )
    gate = SiteGate(8, settings, SiteGateMetrics(registry))
    counts = CameraMetrics(DeviceMetrics(registry), "yard")
    policy = CascadePolicy(CascadeConfig(calibrate_every=0), CascadeMetrics(registry), "yard")
    policy.feedback(frame_pb2.CascadeFeedback(estimated_accuracy=0.95))
    feats, positive = _answers(np.random.default_rng(7), 600, 8)
    for i in range(len(feats)):
        if not gate.decide("yard", [i], feats[i : i + 1])[0]:
            counts.dropped_gate.inc()  # as device/worker.py counts the gate's drops
            continue
        gate.answer("yard", i, int(positive[i]))
    st = gate.status("yard")
    assert st is not None and st.on and st.state == "on", st
    dropped = registry.get_sample_value(
        "strata_device_frames_dropped_gate_total", {"camera": "yard"}
    )
    assert dropped is not None and dropped > 50

    with chromium(tmp_path) as driver:
        cascade, site = camera_cells(driver, console, "yard")
        assert cascade.get_attribute("data-verdict") == "held"
        assert cascade.text == "f1 0.950, target 0.900: held"
        assert site.get_attribute("data-state") == "on"
        assert st.recall is not None
        assert site.text.startswith(f"on: recall {st.recall:.3f} (needs 0.98)"), site.text
        assert f"{st.samples} samples, {int(dropped)} frames dropped" in site.text, site.text
        screenshot(driver, tmp_path, "cameras-gate-on")
        assert console_errors(driver) == []
    api = api_camera(console, "yard")
    assert api["site_gate"]["dropped"] == int(dropped)
    assert api["site_gate"]["needs"] == {
        "recall": 0.98,
        "samples": 30.0,
        "object_probes": 10.0,
        "empty_probes": 10.0,
    }


def test_the_scrape_reads_each_verdict_and_state(
    device_metrics: tuple[CollectorRegistry, str],
) -> None:
    """Over the real /metrics: a cascade with no estimate yet (waiting), one under its
    target with room to keep more (recovering), a camera without cascade or site gate
    (None for both), and a site gate switched off again when its recall fell."""
    from strata.cloud.console.scrape import Scraper

    registry, url = device_metrics
    metrics = CascadeMetrics(registry)
    CascadePolicy(CascadeConfig(calibrate_every=0), metrics, "new")
    under = CascadePolicy(CascadeConfig(calibrate_every=0, metric="counting"), metrics, "busy")
    under.feedback(frame_pb2.CascadeFeedback(estimated_counting=0.8))
    CameraMetrics(DeviceMetrics(registry), "plain")
    settings = HeadSettings(
        holdout_every=3, window=30, min_positives=5, min_negatives=5, min_training=30
    )
    gate = SiteGate(8, settings, SiteGateMetrics(registry))
    feats, positive = _answers(np.random.default_rng(3), 300, 8)
    for i in range(len(feats)):
        if gate.decide("busy", [i], feats[i : i + 1])[0]:
            gate.answer("busy", i, int(positive[i]))
    assert gate.is_on("busy")
    # The site changes: frames that look empty to the head now hold objects.
    empty = feats[~positive]
    for k in range(120):
        i = 1000 + k
        if gate.decide("busy", [i], empty[k % len(empty)][None])[0]:
            gate.answer("busy", i, 1)
    st = gate.status("busy")
    assert st is not None and st.state == "off", st

    cams = Scraper([url], 5.0).scrape().cameras
    new, busy, plain = cams["new"], cams["busy"], cams["plain"]
    assert new.cascade is not None and new.cascade.verdict == "waiting"
    assert new.cascade.words() == "f1 -, target 0.900: no estimate yet"
    assert new.site_gate is None
    assert busy.cascade is not None and busy.cascade.verdict == "recovering", busy.cascade
    assert busy.cascade.words() == (
        "counting 0.800, target 0.900: under target, keeping more frames"
    )
    assert busy.site_gate is not None and busy.site_gate.state == "off"
    assert busy.site_gate.recall == st.recall and busy.site_gate.samples == st.samples
    assert plain.cascade is None and plain.site_gate is None
