"""The cost model: pricing a window as a day, per-camera usage from real exposition text."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from strata.cloud.metrics import CloudMetrics
from strata.edge.metrics import EdgeMetrics
from strata.shared.config.common import CostConfig
from strata.shared.cost import (
    Usage,
    cascade_vs_every_frame,
    parse_exposition,
    per_day,
    usage_by_camera,
)

PRICES = CostConfig(
    gpu_per_hour=3.6, egress_per_gb=0.1, storage_per_gb_month=0.03, retention_days=30
)


def test_a_window_is_priced_as_a_day() -> None:
    # 10 s of GPU and 1 MB out over 100 s: 8640 GPU-s and 864 MB a day.
    cost = per_day(
        Usage(edge_gpu_seconds=6, cloud_gpu_seconds=4, egress_bytes=1e6, stored_bytes=1e5),
        100.0,
        PRICES,
    )
    assert cost.gpu == pytest.approx(8640 / 3600 * 3.6)
    assert cost.egress == pytest.approx(0.864 * 0.1)
    # 86.4 MB a day held 30 days: 2.592 GB-month at 0.03.
    assert cost.storage == pytest.approx(0.0864 * 30 / 30 * 0.03)
    assert cost.total == pytest.approx(cost.gpu + cost.egress + cost.storage)
    with pytest.raises(ValueError):
        per_day(Usage(), 0.0, PRICES)


def test_clip_bytes_are_paid_as_egress_and_storage() -> None:
    # 1 MB of clips over 100 s: 864 MB a day uploaded from the site and held 30 days.
    clips = per_day(Usage(clip_bytes=1e6), 100.0, PRICES)
    assert clips.egress == pytest.approx(0.864 * 0.1)
    assert clips.storage == pytest.approx(0.864 * 30 / 30 * 0.03)
    assert clips.gpu == 0


def test_usage_deltas_survive_a_daemon_restart() -> None:
    before = Usage(edge_gpu_seconds=100, frames=1000)
    after = Usage(edge_gpu_seconds=3, frames=30)  # counters reset: count from zero
    assert after - before == Usage(edge_gpu_seconds=3, frames=30)
    assert Usage(frames=1500) - Usage(frames=1000) == Usage(frames=500)


def test_usage_by_camera_from_the_tiers_real_metrics() -> None:
    edge = EdgeMetrics(CollectorRegistry())
    edge.camera_gpu_seconds.labels("cam1").inc(2.5)
    edge.camera_frames.labels("cam1").inc(100)
    edge.camera_bytes.labels("cam1", "in").inc(5_000_000)
    edge.camera_bytes.labels("cam1", "uplink").inc(20_000)
    edge.camera_gpu_seconds.labels("cam2").inc(1.0)
    cloud = CloudMetrics(CollectorRegistry())
    cloud.camera_gpu_seconds.labels("cam1").inc(0.5)
    cloud.camera_events.labels("cam1").inc(7)
    cloud.camera_stored_bytes.labels("cam1").inc(700)
    cloud.camera_clip_bytes.labels("cam1").inc(3_000_000)
    text = generate_latest(edge.registry).decode() + generate_latest(cloud.registry).decode()
    usage = usage_by_camera(parse_exposition(text))
    assert usage["cam1"] == Usage(
        edge_gpu_seconds=2.5,
        cloud_gpu_seconds=0.5,
        frames=100,
        lan_bytes=5_000_000,
        egress_bytes=20_000,
        events=7,
        stored_bytes=700,
        clip_bytes=3_000_000,
    )
    assert usage["cam2"] == Usage(edge_gpu_seconds=1.0)


def test_the_cascade_costs_less_than_every_frame_when_it_drops_frames() -> None:
    c = cascade_vs_every_frame(
        fps=10,
        kept_fraction=0.4,
        detector_s_per_frame=0.01,
        source_bytes_per_s=50_000,
        cloud_bytes_per_s=2_000,
        crops_per_s=0.5,
        classifier_s_per_crop=0.02,
        stored_bytes_per_event=200,
        prices=PRICES,
    )
    # Every frame: 0.1 GPU-s/s = 8640 GPU-s a day = 2.4 h at 3.6.
    assert c.every_frame.total == pytest.approx(2.4 * 3.6)
    # Every frame to a cloud GPU also pays the stream's egress: 4.32 GB a day.
    assert c.every_frame_cloud.egress == pytest.approx(4.32 * 0.1)
    # Cascade: 40 % of the detector + 0.01 GPU-s/s of classifier + 0.1728 GB egress.
    assert c.cascade.gpu == pytest.approx((0.04 + 0.01) * 86400 / 3600 * 3.6)
    assert c.cascade.egress == pytest.approx(0.1728 * 0.1)
    assert 0 < c.saving < 1
