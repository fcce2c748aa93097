"""The cascade bench puts the device's event-clip bytes per camera-day beside the
cascade's bytes to the edge and to the cloud (issue 26), read from the device's metrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from strata.device.metrics import ClipMetrics, DeviceMetrics
from strata.shared.vision.agreement import Agreement
from strata.tools.bench import report
from strata.tools.bench.cascade import CLIP_BYTES, ClipResult
from strata.tools.demo.scrape import parse
from strata.tools.demo.summary import value


def test_clip_bytes_per_camera_day_beside_the_cascades() -> None:
    registry = CollectorRegistry()
    metrics = DeviceMetrics(registry)
    ClipMetrics(metrics, "cam0").clip_bytes.inc(3_000)
    ClipMetrics(metrics, "cam1").clip_bytes.inc(1_000)
    scrapes = {"device": parse(generate_latest(registry).decode())}
    assert value(scrapes, CLIP_BYTES) == 4_000
    a = Agreement(
        tagging=1, counting=1, f1=1, true_positives=1, false_positives=0, false_negatives=0,
        frames=1,
    )  # fmt: skip
    # 864 frames at 10 fps: 86.4 s, a thousandth of a day.
    clip = ClipResult("vtest.mp4", 864, 100, 10, 10**6, 2e5, 5e3, a, bytes_clips=4_000, fps=10)
    keys = report.cascade_keys(clip)
    assert keys["cascade.clip_bytes_per_camera_day"] == pytest.approx(4e6)
    assert keys["cascade.edge_bytes_per_camera_day"] == pytest.approx(2e8)
    assert keys["cascade.cloud_bytes_per_camera_day"] == pytest.approx(5e6)
    unknown = ClipResult("x.mp4", 10, 1, 1, 1, 1.0, 1.0, a)  # no frame rate: no figure
    assert report.cascade_keys(unknown)["cascade.clip_bytes_per_camera_day"] is None
