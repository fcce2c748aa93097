"""A real cloud server: per-camera cost accounting (compute, events, bytes), GPU telemetry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cloud_helpers import make_config, stub_for
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, current_version
from strata.shared.metrics import sample
from test_service import BLUE, RED, crop, uplink


def test_each_camera_is_charged_its_crops(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    model, labels = colour_model
    server = start_server(make_config(model, tmp_path / "events.sqlite", labels))
    _channel, stub = stub_for(server)
    crops = [crop(i, RED, camera="lobby") for i in range(3)] + [
        crop(10 + i, BLUE, camera="door") for i in range(2)
    ]
    batch = analytics_pb2.CropBatch(version=current_version(), crops=crops)
    acks = uplink(stub, [batch])
    assert len(acks) == 5
    reg = server.metrics.registry
    for cam, n in (("lobby", 3), ("door", 2)):
        assert sample(reg, "strata_cloud_camera_events_total", {"camera": cam}) == n
        assert sample(reg, "strata_cloud_camera_gpu_seconds_total", {"camera": cam}) > 0
        sent = sum(len(c.image) for c in crops if c.camera_id == cam)
        assert sample(reg, "strata_cloud_camera_crop_bytes_total", {"camera": cam}) == sent
        assert sample(reg, "strata_cloud_camera_stored_bytes_total", {"camera": cam}) > 50 * n
    # A resend is a duplicate: no new event, no new stored bytes.
    stored = sample(reg, "strata_cloud_camera_stored_bytes_total", {"camera": "door"})
    uplink(stub, [analytics_pb2.CropBatch(version=current_version(), crops=crops[3:])])
    assert sample(reg, "strata_cloud_camera_events_total", {"camera": "door"}) == 2
    assert sample(reg, "strata_cloud_camera_stored_bytes_total", {"camera": "door"}) == stored


def test_the_cloud_exports_gpu_telemetry_only_with_a_gpu(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    import shutil

    from prometheus_client import generate_latest

    model, labels = colour_model
    server = start_server(make_config(model, tmp_path / "events.sqlite", labels))
    text = generate_latest(server.metrics.registry).decode()
    if shutil.which("nvidia-smi"):
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
    else:
        assert "DCGM_" not in text  # absent, not zero
